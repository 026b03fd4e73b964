#include "common/safetensors/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <limits>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/status/status_macros.h"
#include "nlohmann/json.hpp"

namespace floe {
namespace {

// The reference implementation refuses headers above 100 MB; so do we, which
// also bounds what a corrupt length field can make us parse.
constexpr uint64_t kMaxHeaderBytes = 100u << 20;

absl::Status ErrnoError(const std::string& what, const std::string& path) {
  int err = errno;
  std::string message = absl::StrCat(what, " ", path, ": ", std::strerror(err));
  return err == ENOENT ? absl::NotFoundError(message) : absl::InternalError(message);
}

}  // namespace

size_t SafetensorsDTypeSize(absl::string_view name) {
  if (name == "BOOL" || name == "U8" || name == "I8" || name == "F8_E4M3" ||
      name == "F8_E5M2") {
    return 1;
  }
  if (name == "I16" || name == "U16" || name == "F16" || name == "BF16") return 2;
  if (name == "I32" || name == "U32" || name == "F32") return 4;
  if (name == "I64" || name == "U64" || name == "F64") return 8;
  return 0;
}

absl::StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::Open(const std::string& path) {
  std::unique_ptr<SafetensorsFile> file(new SafetensorsFile());
  file->path_ = path;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoError("cannot open safetensors file", path);
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    absl::Status status = ErrnoError("cannot stat", path);
    ::close(fd);
    return status;
  }
  uint64_t file_size = static_cast<uint64_t>(st.st_size);
  if (file_size < 8) {
    ::close(fd);
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": truncated safetensors file (", file_size, " bytes; the header length alone takes 8)"));
  }
  void* mapping = ::mmap(nullptr, file_size, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);  // the mapping keeps the file alive
  if (mapping == MAP_FAILED) return ErrnoError("cannot mmap", path);
  file->mapping_ = mapping;
  file->mapping_size_ = file_size;

  const auto* bytes = static_cast<const uint8_t*>(mapping);
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | bytes[i];
  if (header_len > file_size - 8) {
    return absl::InvalidArgumentError(absl::StrCat(
        path, ": header length ", header_len, " runs past the end of the file (",
        file_size, " bytes; truncated or not a safetensors file)"));
  }
  if (header_len > kMaxHeaderBytes) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": header length ", header_len,
                                                   " exceeds the limit of ", kMaxHeaderBytes));
  }
  file->data_ = bytes + 8 + header_len;
  absl::string_view header(reinterpret_cast<const char*>(bytes + 8), header_len);
  FLOE_RETURN_IF_ERROR(file->ParseHeader(header, file_size - 8 - header_len));
  return file;
}

absl::Status SafetensorsFile::ParseHeader(absl::string_view header, uint64_t data_size) {
  nlohmann::json root = nlohmann::json::parse(header.begin(), header.end(), nullptr,
                                              /*allow_exceptions=*/false);
  if (root.is_discarded()) {
    return absl::InvalidArgumentError(absl::StrCat(path_, ": header is not valid JSON"));
  }
  if (!root.is_object()) {
    return absl::InvalidArgumentError(absl::StrCat(path_, ": header is not a JSON object"));
  }
  for (const auto& [name, value] : root.items()) {
    if (name == "__metadata__") {
      if (!value.is_object()) {
        return absl::InvalidArgumentError(
            absl::StrCat(path_, ": __metadata__ is not an object of strings"));
      }
      for (const auto& [key, text] : value.items()) {
        if (!text.is_string()) {
          return absl::InvalidArgumentError(
              absl::StrCat(path_, ": __metadata__.", key, " is not a string"));
        }
        metadata_[key] = text.get<std::string>();
      }
      continue;
    }
    auto bad = [&, &name = name](absl::string_view why) {
      return absl::InvalidArgumentError(absl::StrCat(path_, ": tensor ", name, ": ", why));
    };
    if (!value.is_object()) return bad("header entry is not an object");
    Entry entry;
    auto dtype = value.find("dtype");
    if (dtype == value.end() || !dtype->is_string()) return bad("missing dtype");
    entry.dtype_name = dtype->get<std::string>();
    size_t element_size = SafetensorsDTypeSize(entry.dtype_name);
    if (element_size == 0) {
      return bad(absl::StrCat("unknown dtype \"", entry.dtype_name, "\""));
    }
    auto shape = value.find("shape");
    if (shape == value.end() || !shape->is_array()) return bad("missing shape");
    // numel * element size must not overflow: bound it by the data section.
    uint64_t expected_bytes = element_size;
    bool overflow = false;
    for (const auto& dim : *shape) {
      if (!dim.is_number_unsigned()) return bad("shape holds a non-negative-integer dimension");
      uint64_t d = dim.get<uint64_t>();
      if (d > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return bad("shape dimension too large");
      entry.shape.push_back(static_cast<int64_t>(d));
      if (d != 0 && expected_bytes > std::numeric_limits<uint64_t>::max() / d) overflow = true;
      expected_bytes *= d;
    }
    auto offsets = value.find("data_offsets");
    if (offsets == value.end() || !offsets->is_array() || offsets->size() != 2 ||
        !(*offsets)[0].is_number_unsigned() || !(*offsets)[1].is_number_unsigned()) {
      return bad("data_offsets is not a pair of non-negative integers");
    }
    entry.begin = (*offsets)[0].get<uint64_t>();
    entry.end = (*offsets)[1].get<uint64_t>();
    if (entry.begin > entry.end) {
      return bad(absl::StrCat("data_offsets [", entry.begin, ", ", entry.end, "] end before they begin"));
    }
    if (entry.end > data_size) {
      return bad(absl::StrCat("data_offsets [", entry.begin, ", ", entry.end,
                              "] run past the data section (", data_size,
                              " bytes; file truncated or header lying)"));
    }
    if (overflow || entry.end - entry.begin != expected_bytes) {
      return bad(absl::StrCat("data_offsets [", entry.begin, ", ", entry.end, "] span ",
                              entry.end - entry.begin, " bytes but shape ",
                              ShapeToString(entry.shape), " of ", entry.dtype_name, " needs ",
                              overflow ? std::string("more than 2^64") : absl::StrCat(expected_bytes)));
    }
    entries_.emplace(name, std::move(entry));
  }
  return absl::OkStatus();
}

SafetensorsFile::~SafetensorsFile() {
  if (mapping_ != nullptr) ::munmap(mapping_, mapping_size_);
}

void SafetensorsFile::ReleasePages() const {
  // A read-only private file mapping has no dirty pages: DONTNEED only unmaps
  // them (they stay in the page cache), and the contents read back unchanged.
  if (mapping_ != nullptr) ::madvise(mapping_, mapping_size_, MADV_DONTNEED);
}

const SafetensorsFile::Entry* SafetensorsFile::FindEntry(absl::string_view name) const {
  auto it = entries_.find(name);
  return it == entries_.end() ? nullptr : &it->second;
}

bool SafetensorsFile::Contains(absl::string_view name) const { return FindEntry(name) != nullptr; }

absl::StatusOr<TensorView> SafetensorsFile::Get(absl::string_view name) const {
  const Entry* entry = FindEntry(name);
  if (entry == nullptr) {
    return absl::NotFoundError(absl::StrCat("tensor ", name, " not found in ", path_));
  }
  absl::StatusOr<DType> dtype = ParseSafetensorsDType(entry->dtype_name);
  if (!dtype.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path_, ": tensor ", name, ": ", dtype.status().message()));
  }
  TensorView view;
  view.dtype = *dtype;
  view.shape = entry->shape;
  // A zero-element tensor still gets a non-null pointer: present() means "in the file".
  view.data = data_ + entry->begin;
  return view;
}

absl::StatusOr<SafetensorsFile::Raw> SafetensorsFile::GetRaw(absl::string_view name) const {
  const Entry* entry = FindEntry(name);
  if (entry == nullptr) return absl::NotFoundError(absl::StrCat("tensor ", name, " not found in ", path_));
  return Raw{entry, data_ + entry->begin};
}

std::vector<std::string> SafetensorsFile::names() const {
  std::vector<std::string> out;
  out.reserve(entries_.size());
  for (const auto& [name, entry] : entries_) out.push_back(name);
  return out;
}

}  // namespace floe
