// The suffix-cache snapshot file: the raw token sequences of the cached
// responses per namespace, oldest first (the trees are rebuilt on restore, so
// the format does not depend on the tree layout).
//
//   header  "FLOESUFX" | u32 version (1) | u32 max_depth | u64 payload bytes
//           | u64 FNV-1a 64 of (the header before it + the payload)
//   payload u32 namespaces, each: u32 name bytes, name, u32 responses,
//           each: u32 id bytes, id, u32 tokens, tokens as int32
// All integers little-endian. A file that is short, long, has another magic or
// version, or fails the checksum is rejected as a whole (DATA_LOSS).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace floe::suffix_cache {

struct SnapshotResponse {
  std::string request_id;
  std::vector<int32_t> tokens;
};
struct SnapshotNamespace {
  std::string name;
  std::vector<SnapshotResponse> responses;  // FIFO order, oldest first
};
struct SnapshotData {
  uint32_t max_depth = 0;
  std::vector<SnapshotNamespace> namespaces;
};

std::string EncodeSnapshot(const SnapshotData& data);
absl::StatusOr<SnapshotData> DecodeSnapshot(absl::string_view bytes);

// Writes `bytes` to `path` durably: a temp file in the same folder, fsync,
// rename over `path`, fsync of the folder.
absl::Status WriteFileAtomically(const std::string& path, absl::string_view bytes);
// NotFound when the file does not exist.
absl::StatusOr<std::string> ReadWholeFile(const std::string& path);

}  // namespace floe::suffix_cache
