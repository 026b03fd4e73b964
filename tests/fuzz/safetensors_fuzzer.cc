// Fuzzes .safetensors header parsing (common/safetensors). The input is the
// whole file (u64 header length, JSON header, data), opened from an
// in-memory file as a checkpoint would be. Invariants of an accepted file:
// every tensor's byte range lies inside the data section and holds exactly
// numel * element size bytes (no overflow), Get() agrees with the entry and
// points inside the file, names() and Contains() agree; then every tensor's
// first and last byte is read (ASan checks the reads against the input copy
// kept beside the mapping).
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <string>

#include "common/safetensors/safetensors.h"
#include "common/tensor/dtype.h"
#include "tests/fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace floe;
  const int fd = memfd_create("fuzz.safetensors", MFD_CLOEXEC);
  FUZZ_CHECK(fd >= 0, "memfd_create failed");
  for (size_t done = 0; done < size;) {
    const ssize_t n = write(fd, data + done, size - done);
    FUZZ_CHECK(n > 0, "write failed");
    done += static_cast<size_t>(n);
  }
  auto file = SafetensorsFile::Open("/proc/self/fd/" + std::to_string(fd));
  close(fd);
  if (!file.ok()) {
    FUZZ_CHECK(file.status().code() == absl::StatusCode::kInvalidArgument, "%s", file.status().ToString().c_str());
    return 0;
  }
  FUZZ_CHECK(size >= 8, "accepted a %zu-byte file", size);
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | data[i];
  FUZZ_CHECK(header_len <= size - 8, "header length %llu past the end", static_cast<unsigned long long>(header_len));
  const uint64_t data_size = size - 8 - header_len;
  const uint8_t* file_data = data + 8 + header_len;
  for (const std::string& name : (*file)->names()) {
    FUZZ_CHECK((*file)->Contains(name), "names() lists %s but Contains() says no", name.c_str());
    const SafetensorsFile::Entry* e = (*file)->FindEntry(name);
    FUZZ_CHECK(e != nullptr, "no entry for %s", name.c_str());
    FUZZ_CHECK(e->begin <= e->end && e->end <= data_size, "tensor %s spans [%llu, %llu) of %llu bytes", name.c_str(),
               static_cast<unsigned long long>(e->begin), static_cast<unsigned long long>(e->end),
               static_cast<unsigned long long>(data_size));
    const size_t element = SafetensorsDTypeSize(e->dtype_name);
    FUZZ_CHECK(element > 0, "tensor %s has dtype %s", name.c_str(), e->dtype_name.c_str());
    // numel without overflow: every partial product stays within the data.
    unsigned __int128 bytes = element;
    for (int64_t d : e->shape) {
      FUZZ_CHECK(d >= 0, "tensor %s has a negative dimension", name.c_str());
      bytes *= static_cast<uint64_t>(d);
      if (bytes > (static_cast<unsigned __int128>(1) << 64)) bytes = static_cast<unsigned __int128>(1) << 64;
    }
    FUZZ_CHECK(bytes == e->end - e->begin, "tensor %s: shape needs a different byte count than its offsets",
               name.c_str());
    auto view = (*file)->Get(name);
    if (!view.ok()) {
      FUZZ_CHECK(e->dtype_name != "F32" && e->dtype_name != "F16" && e->dtype_name != "BF16",
                 "Get(%s) failed for a float tensor: %s", name.c_str(), view.status().ToString().c_str());
      continue;
    }
    FUZZ_CHECK(view->shape == e->shape && view->present(), "view of %s", name.c_str());
    FUZZ_CHECK(view->bytes() == e->end - e->begin && DTypeSize(view->dtype) == element, "view size of %s",
               name.c_str());
    if (view->bytes() > 0) {
      // The view points into the mapping; read the same bytes of the input.
      const uint8_t* first = file_data + e->begin;
      const uint8_t* last = file_data + e->end - 1;
      FUZZ_CHECK(*static_cast<const uint8_t*>(view->data) == *first, "first byte of %s", name.c_str());
      FUZZ_CHECK(static_cast<const uint8_t*>(view->data)[view->bytes() - 1] == *last, "last byte of %s",
                 name.c_str());
    }
  }
  FUZZ_CHECK(!(*file)->Contains("\xff not a tensor"), "Contains invented a tensor");
  return 0;
}
