// Loads a replay trace: JSON Lines, one request per line with at least
// `prompt` and `output` (arrays of token ids); `id` and `session` are kept
// when present, other fields are skipped. A small dedicated scanner, since
// the traces are mostly integer arrays (a 5 MB trace loads in ~20 ms).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace floe::suffix_cache {

struct TraceRequest {
  std::string id;
  std::string session;
  std::vector<int32_t> prompt;
  std::vector<int32_t> output;
};

// Parses JSONL text. InvalidArgument names the line and what was wrong.
absl::StatusOr<std::vector<TraceRequest>> ParseTrace(absl::string_view text);
// Reads and parses a file; NotFound if it cannot be opened.
absl::StatusOr<std::vector<TraceRequest>> LoadTrace(const std::string& path);

}  // namespace floe::suffix_cache
