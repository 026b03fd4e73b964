#include "common/safetensors/sharded_safetensors.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status/status_macros.h"
#include "nlohmann/json.hpp"

namespace floe {

absl::StatusOr<ShardedSafetensors> ShardedSafetensors::OpenDirectory(const std::string& dir) {
  std::filesystem::path base(dir);
  std::error_code ec;
  if (std::filesystem::exists(base / kSafetensorsIndexFile, ec)) {
    return OpenIndex((base / kSafetensorsIndexFile).string());
  }
  if (std::filesystem::exists(base / kSafetensorsSingleFile, ec)) {
    return OpenSingle((base / kSafetensorsSingleFile).string());
  }
  return absl::NotFoundError(absl::StrCat("no ", kSafetensorsSingleFile, " or ",
                                          kSafetensorsIndexFile, " in ", dir));
}

absl::StatusOr<ShardedSafetensors> ShardedSafetensors::OpenSingle(const std::string& path) {
  ShardedSafetensors out;
  out.source_ = path;
  FLOE_ASSIGN_OR_RETURN(auto file, SafetensorsFile::Open(path));
  for (const std::string& name : file->names()) out.file_of_.emplace(name, file.get());
  out.files_.push_back(std::move(file));
  return out;
}

absl::StatusOr<ShardedSafetensors> ShardedSafetensors::OpenIndex(const std::string& index_path) {
  std::ifstream in(index_path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", index_path));
  std::stringstream text;
  text << in.rdbuf();
  nlohmann::json root = nlohmann::json::parse(text.str(), nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded() || !root.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(index_path, ": not a JSON object"));
  }
  auto map = root.find("weight_map");
  if (map == root.end() || !map->is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(index_path, ": missing weight_map object"));
  }
  ShardedSafetensors out;
  out.source_ = index_path;
  std::filesystem::path base = std::filesystem::path(index_path).parent_path();
  std::map<std::string, const SafetensorsFile*> opened;
  for (const auto& [name, shard_value] : map->items()) {
    if (!shard_value.is_string()) {
      return absl::InvalidArgumentError(
          absl::StrCat(index_path, ": weight_map.", name, " is not a file name"));
    }
    std::string shard = shard_value.get<std::string>();
    // Shards live beside the index; refuse paths that would leave the folder.
    if (shard.empty() || shard.find('/') != std::string::npos || shard == "." || shard == "..") {
      return absl::InvalidArgumentError(absl::StrCat(
          index_path, ": weight_map.", name, ": shard \"", shard, "\" is not a plain file name"));
    }
    auto it = opened.find(shard);
    if (it == opened.end()) {
      FLOE_ASSIGN_OR_RETURN(auto file, SafetensorsFile::Open((base / shard).string()));
      it = opened.emplace(shard, file.get()).first;
      out.files_.push_back(std::move(file));
    }
    if (!it->second->Contains(name)) {
      return absl::InvalidArgumentError(absl::StrCat(index_path, ": weight_map puts tensor ",
                                                     name, " in ", shard, ", which lacks it"));
    }
    out.file_of_.emplace(name, it->second);
  }
  return out;
}

const SafetensorsFile* ShardedSafetensors::FileOf(absl::string_view name) const {
  auto it = file_of_.find(name);
  return it == file_of_.end() ? nullptr : it->second;
}

absl::StatusOr<TensorView> ShardedSafetensors::Get(absl::string_view name) const {
  const SafetensorsFile* file = FileOf(name);
  if (file == nullptr) {
    return absl::NotFoundError(absl::StrCat("tensor ", name, " not found in ", source_));
  }
  return file->Get(name);
}

absl::StatusOr<SafetensorsFile::Raw> ShardedSafetensors::GetRaw(absl::string_view name) const {
  const SafetensorsFile* file = FileOf(name);
  if (file == nullptr) return absl::NotFoundError(absl::StrCat("tensor ", name, " not found in ", source_));
  return file->GetRaw(name);
}

std::vector<std::string> ShardedSafetensors::names() const {
  std::vector<std::string> out;
  out.reserve(file_of_.size());
  for (const auto& [name, file] : file_of_) out.push_back(name);
  return out;
}

}  // namespace floe
