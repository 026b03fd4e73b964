// A checkpoint's tensors spread over one or more .safetensors files: either a
// single model.safetensors or the shards a model.safetensors.index.json lists
// ({"weight_map": {tensor name: shard file name}}).
//
// Thread-safety: immutable after Open(); const methods may run on any thread.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/safetensors/safetensors.h"
#include "common/tensor/tensor_view.h"

namespace floe {

inline constexpr char kSafetensorsSingleFile[] = "model.safetensors";
inline constexpr char kSafetensorsIndexFile[] = "model.safetensors.index.json";

class ShardedSafetensors {
 public:
  // Opens dir/model.safetensors.index.json and every shard it names when the
  // index exists, else dir/model.safetensors. NOT_FOUND when neither exists.
  static absl::StatusOr<ShardedSafetensors> OpenDirectory(const std::string& dir);
  // Opens an index file; shard names are resolved next to it. Every tensor the
  // weight_map names must be in its shard (the error names tensor and shard).
  static absl::StatusOr<ShardedSafetensors> OpenIndex(const std::string& index_path);
  static absl::StatusOr<ShardedSafetensors> OpenSingle(const std::string& path);

  // The file holding `name`, or nullptr.
  const SafetensorsFile* FileOf(absl::string_view name) const;
  // As SafetensorsFile::Get, on the shard holding the tensor.
  absl::StatusOr<TensorView> Get(absl::string_view name) const;
  absl::StatusOr<SafetensorsFile::Raw> GetRaw(absl::string_view name) const;
  bool Contains(absl::string_view name) const { return FileOf(name) != nullptr; }
  std::vector<std::string> names() const;  // sorted
  // Where the tensors came from, for messages: the index or the single file.
  const std::string& source() const { return source_; }
  size_t num_files() const { return files_.size(); }
  const SafetensorsFile& file(size_t i) const { return *files_[i]; }

 private:
  std::string source_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, const SafetensorsFile*, std::less<>> file_of_;
};

}  // namespace floe
