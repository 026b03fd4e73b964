// Parses tokenizer.json in one streaming pass. The vocabulary and merges (a few
// hundred thousand entries) go straight into flat vectors instead of a JSON
// tree, which halves load time; everything else becomes a nlohmann::json tree.
// Pure function of its input; thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace floe {

struct TokenizerJson {
  // The document, with model.vocab and model.merges left empty.
  nlohmann::json root;
  // model.vocab in file order.
  std::vector<std::pair<std::string, int64_t>> vocab;
  // model.merges, from either "a b" strings or ["a", "b"] pairs.
  std::vector<std::pair<std::string, std::string>> merges;
};

// INVALID_ARGUMENT naming `source` for malformed JSON, a non-integer vocab id
// or a malformed merge.
absl::StatusOr<TokenizerJson> ParseTokenizerJson(absl::string_view text, absl::string_view source);

}  // namespace floe
