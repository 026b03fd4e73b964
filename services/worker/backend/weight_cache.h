// A weight cache file: the CPU backend's packed matrices (kernels/cpu/matmul.h
// panel layout) for one checkpoint and one rank of one layout, written once
// after a repack and mapped, not repacked, by later starts. The pages are
// the file's page cache: shared by every process that maps it, no second
// copy, and cheap to map when the file was read recently.
//
// Layout: a header (magic, format version, entry table, key) padded to 4 KiB,
// then each matrix's packed bytes at a 4 KiB-aligned offset. The key (the
// checkpoint's fingerprint, the rank layout, the pack format) is stored whole
// and compared on open, so a stale or foreign file is a miss, never wrong
// weights. A WeightCacheWriter writes the matrices one by one under a
// temporary name (large writes: the page cache then holds them in large
// folios) renamed into place by Commit, so a reader sees a whole file or
// none. Open maps the file 2 MiB-aligned and asks for huge pages, so the
// kernel maps those folios with 2 MiB entries: decode streams every weight
// each step, and 4 KiB mappings cost it about a sixth of its speed here.
// A folder is bounded: Open and Commit stamp a file's modification time as
// its last use, and Create first deletes the folder's least recently used
// cache files until they and the new file fit its byte bound, sparing files
// opened or written in the last kRecentUseSeconds (the other ranks of a
// worker that start together) and the file it replaces. Deleting a file another process maps is safe:
// the mapping keeps it until unmapped.
// Threading: an opened file is immutable; any thread may read it.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/cpu/matmul.h"

namespace floe {

class WeightCacheFile {
 public:
  // The file name for `key` in a cache folder: packed-<64-bit hash>.bin.
  static std::string FileName(const std::string& key);

  // Maps `path` when it holds `key`'s matrices. NOT_FOUND when it does not
  // exist; FAILED_PRECONDITION (saying why) when it is truncated, of another
  // format or for another key.
  static absl::StatusOr<std::unique_ptr<WeightCacheFile>> Open(const std::string& path, const std::string& key);

  int size() const { return static_cast<int>(entries_.size()); }
  // Entry i as a view of the mapping, when its dtype and shape are these.
  std::optional<cpu::PackedMatrix> Matrix(int i, DType dtype, int64_t n, int64_t k) const;

 private:
  struct Entry {
    uint32_t dtype = 0;
    uint32_t reserved = 0;
    int64_t n = 0, k = 0;
    uint64_t offset = 0, bytes = 0;
  };
  friend class WeightCacheWriter;
  std::vector<Entry> entries_;
  std::shared_ptr<void> mapping_;  // munmaps when the last view goes
};

class WeightCacheWriter {
 public:
  struct Shape {
    DType dtype;
    int64_t n, k;
  };
  // Creates `path`'s folder and a temporary file next to `path` with room
  // reserved (fallocate: a full disk fails here, not half way) for matrices
  // of these shapes.
  // The folder's cache files (packed-*.bin) are bounded to
  // folder_max_bytes, the new one included, as said above.
  static absl::StatusOr<std::unique_ptr<WeightCacheWriter>> Create(const std::string& path, const std::string& key,
                                                                   std::span<const Shape> shapes,
                                                                   uint64_t folder_max_bytes = UINT64_MAX);
  // How long a file counts as in use after its last Open or Commit.
  static constexpr int kRecentUseSeconds = 600;
  // Removes the temporary file unless committed.
  ~WeightCacheWriter();

  int size() const { return static_cast<int>(entries_.size()); }
  // Writes matrix i (not a slice), which must have the dtype and shape
  // Create was given for it.
  absl::Status Write(int i, const cpu::PackedMatrix& matrix);
  // Writes the header and renames the file into place.
  absl::Status Commit();
  // The files Create deleted to stay within the folder's bound.
  const std::vector<std::string>& evicted() const { return evicted_; }

 private:
  std::string path_, temp_, key_;
  std::vector<WeightCacheFile::Entry> entries_;
  uint64_t header_bytes_ = 0;
  int fd_ = -1;
  bool committed_ = false;
  std::vector<std::string> evicted_;
};

}  // namespace floe
