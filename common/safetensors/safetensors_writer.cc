#include "common/safetensors/safetensors_writer.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"
#include "common/safetensors/safetensors.h"
#include "nlohmann/json.hpp"

namespace floe {
namespace {

absl::StatusOr<uint64_t> ShapeBytes(const std::string& name, const std::vector<int64_t>& shape,
                                    size_t element_size) {
  uint64_t bytes = element_size;
  for (int64_t dim : shape) {
    if (dim < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensor ", name, ": negative dimension in shape ", ShapeToString(shape)));
    }
    bytes *= static_cast<uint64_t>(dim);
  }
  return bytes;
}

}  // namespace

absl::string_view SafetensorsDTypeName(DType dtype) {
  switch (dtype) {
    case DType::kF32: return "F32";
    case DType::kF16: return "F16";
    case DType::kBF16: return "BF16";
    case DType::kI8: return "I8";
    case DType::kF8E4M3: return "F8_E4M3";
  }
  return "?";
}

absl::Status SafetensorsWriter::AddPending(Pending pending) {
  if (pending.name == "__metadata__") {
    return absl::InvalidArgumentError("tensor name __metadata__ is reserved");
  }
  for (const Pending& existing : tensors_) {
    if (existing.name == pending.name) {
      return absl::InvalidArgumentError(absl::StrCat("tensor ", pending.name, " added twice"));
    }
  }
  absl::StatusOr<uint64_t> bytes = ShapeBytes(pending.name, pending.shape, pending.element_size);
  if (!bytes.ok()) return bytes.status();
  if (!pending.fill && pending.data.size() != *bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "tensor ", pending.name, ": ", pending.data.size(), " bytes given but shape ",
        ShapeToString(pending.shape), " of ", pending.dtype_name, " needs ", *bytes));
  }
  pending.bytes = *bytes;
  data_bytes_ += *bytes;
  tensors_.push_back(std::move(pending));
  return absl::OkStatus();
}

absl::Status SafetensorsWriter::Add(const std::string& name, DType dtype,
                                    std::vector<int64_t> shape, std::vector<uint8_t> bytes) {
  return Add(name, SafetensorsDTypeName(dtype), std::move(shape), std::move(bytes));
}

absl::Status SafetensorsWriter::Add(const std::string& name, absl::string_view safetensors_dtype,
                                    std::vector<int64_t> shape, std::vector<uint8_t> bytes) {
  Pending pending;
  pending.name = name;
  pending.dtype_name = std::string(safetensors_dtype);
  pending.element_size = SafetensorsDTypeSize(safetensors_dtype);
  if (pending.element_size == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("tensor ", name, ": unknown safetensors dtype \"", safetensors_dtype, "\""));
  }
  pending.shape = std::move(shape);
  pending.data = std::move(bytes);
  return AddPending(std::move(pending));
}

absl::Status SafetensorsWriter::AddLazy(const std::string& name, DType dtype,
                                        std::vector<int64_t> shape, FillFn fill) {
  Pending pending;
  pending.name = name;
  pending.dtype_name = std::string(SafetensorsDTypeName(dtype));
  pending.element_size = DTypeSize(dtype);
  pending.shape = std::move(shape);
  pending.fill = std::move(fill);
  return AddPending(std::move(pending));
}

absl::Status SafetensorsWriter::Write(const std::string& path) const {
  std::vector<const Pending*> order;
  for (const Pending& pending : tensors_) order.push_back(&pending);
  std::stable_sort(order.begin(), order.end(), [](const Pending* a, const Pending* b) {
    return a->element_size > b->element_size;
  });
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata_.empty()) header["__metadata__"] = metadata_;
  uint64_t offset = 0;
  for (const Pending* pending : order) {
    header[pending->name] = {{"dtype", pending->dtype_name},
                             {"shape", pending->shape},
                             {"data_offsets", {offset, offset + pending->bytes}}};
    offset += pending->bytes;
  }
  std::string header_text = header.dump();
  header_text.append((8 - header_text.size() % 8) % 8, ' ');

  std::string tmp_path = path + ".tmp";
  std::unique_ptr<FILE, int (*)(FILE*)> out(std::fopen(tmp_path.c_str(), "wb"), &std::fclose);
  if (!out) {
    return absl::InternalError(absl::StrCat("cannot create ", tmp_path, ": ", std::strerror(errno)));
  }
  uint8_t length[8];
  uint64_t header_len = header_text.size();
  for (int i = 0; i < 8; ++i) length[i] = static_cast<uint8_t>(header_len >> (8 * i));
  bool ok = std::fwrite(length, 1, 8, out.get()) == 8 &&
            std::fwrite(header_text.data(), 1, header_text.size(), out.get()) == header_text.size();
  std::vector<uint8_t> buffer;
  for (const Pending* pending : order) {
    if (!ok) break;
    const uint8_t* data = pending->data.data();
    if (pending->fill) {
      buffer.resize(pending->bytes);
      pending->fill(buffer.data(), buffer.size());
      data = buffer.data();
    }
    ok = std::fwrite(data, 1, pending->bytes, out.get()) == pending->bytes;
  }
  int close_result = std::fclose(out.release());
  if (!ok || close_result != 0) {
    std::remove(tmp_path.c_str());
    return absl::InternalError(absl::StrCat("cannot write ", path, ": ", std::strerror(errno)));
  }
  if (std::rename(tmp_path.c_str(), path.c_str()) != 0) {
    std::remove(tmp_path.c_str());
    return absl::InternalError(absl::StrCat("cannot rename ", tmp_path, " to ", path, ": ",
                                            std::strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace floe
