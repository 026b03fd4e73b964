// The suffix-cache snapshot file: the raw token sequences of the cached
// responses per namespace, oldest first, and (version 2) an image of each
// namespace's global tree. The tokens alone rebuild every tree (any layout,
// any build); the image, when this build can load it, restores the tree at
// copy speed instead (SuffixTree::LoadImage).
//
//   header  "FLOESUFX" | u32 version (1 or 2) | u32 max_depth | u64 payload
//           bytes | u64 FNV-1a 64 of (the header before it + the payload)
//   payload u32 namespaces, each: u32 name bytes, name, u32 responses,
//           each: u32 id bytes, id, [v2: i32 seq id in the image,]
//           u32 tokens, tokens as int32; [v2: u64 image bytes, image]
// All integers little-endian. A file that is short, long, has another magic or
// version, or fails the checksum is rejected as a whole (DATA_LOSS). Version
// 1 files (no images) still load.
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
  int32_t seq_id = -1;  // its sequence in tree_image; -1: none
};
struct SnapshotNamespace {
  std::string name;
  std::vector<SnapshotResponse> responses;  // FIFO order, oldest first
  std::string tree_image;                   // empty: rebuild from the tokens
};
struct SnapshotData {
  uint32_t max_depth = 0;
  std::vector<SnapshotNamespace> namespaces;
};

// version 2 unless `version` is 1 (for tests of old files: no seq ids, no images).
std::string EncodeSnapshot(const SnapshotData& data, uint32_t version = 2);
absl::StatusOr<SnapshotData> DecodeSnapshot(absl::string_view bytes);

// Writes `bytes` to `path` durably: a temp file in the same folder, fsync,
// rename over `path`, fsync of the folder.
absl::Status WriteFileAtomically(const std::string& path, absl::string_view bytes);
// NotFound when the file does not exist.
absl::StatusOr<std::string> ReadWholeFile(const std::string& path);

}  // namespace floe::suffix_cache
