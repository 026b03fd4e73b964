#include "services/worker/backend/weight_cache.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace floe {
namespace {

constexpr char kMagic[8] = {'F', 'L', 'O', 'E', 'P', 'A', 'K', '1'};
constexpr uint64_t kAlign = 4096;
constexpr uint64_t kMaxEntries = 1 << 20;
constexpr uint64_t kMaxKeyBytes = 1 << 20;

struct Header {
  char magic[8];
  uint64_t header_bytes;  // header, entries and key, padded to kAlign
  uint64_t num_entries;
  uint64_t key_bytes;
};

uint64_t AlignUp(uint64_t x) { return (x + kAlign - 1) / kAlign * kAlign; }

// Writes all of [data, data + bytes) at `offset`.
bool PWriteAll(int fd, const void* data, uint64_t bytes, uint64_t offset) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    const ssize_t n = ::pwrite(fd, p, std::min<uint64_t>(bytes, uint64_t{1} << 30), static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    bytes -= n;
    offset += n;
  }
  return true;
}

absl::Status Errno(const char* what, const std::string& path) {
  return absl::Status(absl::ErrnoToStatusCode(errno), absl::StrCat(what, " ", path, ": ", std::strerror(errno)));
}

// Deletes the least recently used cache files in `folder` until they and
// `incoming` bytes fit in max_bytes, sparing `replaced` (the new file takes
// its place) and files used in the last kRecentUseSeconds. Returns the
// names deleted.
std::vector<std::string> PruneFolder(const std::filesystem::path& folder, const std::filesystem::path& replaced,
                                     uint64_t incoming, uint64_t max_bytes) {
  namespace fs = std::filesystem;
  struct File {
    fs::path path;
    uint64_t bytes;
    fs::file_time_type used;
  };
  std::vector<File> files;
  uint64_t total = 0;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(folder, ec)) {
    const std::string name = entry.path().filename().string();
    if (!name.starts_with("packed-") || !name.ends_with(".bin") || entry.path() == replaced) continue;
    const uint64_t bytes = entry.file_size(ec);
    if (ec) continue;
    const fs::file_time_type used = entry.last_write_time(ec);
    if (ec) continue;
    files.push_back({entry.path(), bytes, used});
    total += bytes;
  }
  std::vector<std::string> evicted;
  if (total + incoming <= max_bytes) return evicted;
  std::sort(files.begin(), files.end(), [](const File& a, const File& b) { return a.used < b.used; });
  const fs::file_time_type recent = fs::file_time_type::clock::now() - std::chrono::seconds(
                                                                          WeightCacheWriter::kRecentUseSeconds);
  for (const File& file : files) {
    if (total + incoming <= max_bytes || file.used >= recent) break;
    if (fs::remove(file.path, ec)) {
      total -= file.bytes;
      evicted.push_back(file.path.filename().string());
    }
  }
  return evicted;
}

}  // namespace

std::string WeightCacheFile::FileName(const std::string& key) {
  uint64_t h = 14695981039346656037ull;  // FNV-1a: stable across builds and runs
  for (unsigned char c : key) h = (h ^ c) * 1099511628211ull;
  return absl::StrFormat("packed-%016x.bin", h);
}

absl::StatusOr<std::unique_ptr<WeightCacheFile>> WeightCacheFile::Open(const std::string& path,
                                                                       const std::string& key) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Errno("cannot open", path);
  struct stat st {};
  Header h{};
  auto stale = [&](const std::string& why) {
    ::close(fd);
    return absl::FailedPreconditionError(absl::StrCat(path, ": ", why));
  };
  if (::fstat(fd, &st) != 0 || ::pread(fd, &h, sizeof(h), 0) != static_cast<ssize_t>(sizeof(h)))
    return stale("shorter than its header");
  const uint64_t file_size = static_cast<uint64_t>(st.st_size);
  if (std::memcmp(h.magic, kMagic, sizeof(kMagic)) != 0) return stale("not a weight cache file of this format");
  if (h.num_entries > kMaxEntries || h.key_bytes > kMaxKeyBytes ||
      h.header_bytes < sizeof(Header) + h.num_entries * sizeof(Entry) + h.key_bytes || h.header_bytes > file_size)
    return stale("malformed header");
  auto cache = std::unique_ptr<WeightCacheFile>(new WeightCacheFile());
  cache->entries_.resize(h.num_entries);
  std::string stored_key(h.key_bytes, '\0');
  const uint64_t entries_bytes = h.num_entries * sizeof(Entry);
  if (::pread(fd, cache->entries_.data(), entries_bytes, sizeof(Header)) != static_cast<ssize_t>(entries_bytes) ||
      ::pread(fd, stored_key.data(), h.key_bytes, sizeof(Header) + entries_bytes) !=
          static_cast<ssize_t>(h.key_bytes))
    return stale("truncated header");
  if (stored_key != key) return stale("written for other weights or another rank layout");
  for (const Entry& e : cache->entries_) {
    if (e.offset % kAlign != 0 || e.offset < h.header_bytes || e.bytes > file_size || e.offset > file_size - e.bytes)
      return stale("an entry runs past the end of the file");
  }
  // Its last use, which the folder's bound goes by (a read-only folder
  // keeps the old time: harmless).
  ::futimens(fd, nullptr);
  // At a 2 MiB-aligned address (reserve, then map over it), so that file
  // offsets and addresses agree modulo 2 MiB and large page-cache folios can
  // be mapped with 2 MiB entries. Populated now: the mapping is the weights,
  // and a start that reports ready should not fault them in during its
  // first requests.
  constexpr uint64_t kHuge = uint64_t{2} << 20;
  const uint64_t reserved_bytes = AlignUp(file_size) + kHuge;
  void* reserved = ::mmap(nullptr, reserved_bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (reserved == MAP_FAILED) {
    ::close(fd);
    return Errno("cannot reserve address space for", path);
  }
  const uintptr_t begin = reinterpret_cast<uintptr_t>(reserved);
  const uintptr_t aligned = (begin + kHuge - 1) / kHuge * kHuge;
  void* mapping = ::mmap(reinterpret_cast<void*>(aligned), file_size, PROT_READ, MAP_SHARED | MAP_FIXED, fd, 0);
  ::close(fd);
  if (mapping == MAP_FAILED) {
    absl::Status status = Errno("cannot map", path);
    ::munmap(reserved, reserved_bytes);
    return status;
  }
  if (aligned > begin) ::munmap(reserved, aligned - begin);
  const uintptr_t end = aligned + AlignUp(file_size);
  if (begin + reserved_bytes > end) ::munmap(reinterpret_cast<void*>(end), begin + reserved_bytes - end);
  ::madvise(mapping, file_size, MADV_HUGEPAGE);  // a hint: large folios get 2 MiB entries
#ifdef MADV_POPULATE_READ
  if (::madvise(mapping, file_size, MADV_POPULATE_READ) != 0)
#endif
  {
    volatile uint8_t sink = 0;
    for (uint64_t i = 0; i < file_size; i += kAlign) sink = sink + static_cast<const uint8_t*>(mapping)[i];
  }
  cache->mapping_ = std::shared_ptr<void>(mapping, [file_size](void* p) { ::munmap(p, file_size); });
  return cache;
}

std::optional<cpu::PackedMatrix> WeightCacheFile::Matrix(int i, DType dtype, int64_t n, int64_t k) const {
  if (i < 0 || i >= size()) return std::nullopt;
  const Entry& e = entries_[i];
  if (e.dtype != static_cast<uint32_t>(dtype) || e.n != n || e.k != k ||
      e.bytes != cpu::PackedMatrix::PackedBytes(dtype, n, k))
    return std::nullopt;
  const void* data = static_cast<const uint8_t*>(mapping_.get()) + e.offset;
  return cpu::PackedMatrix::FromPackedBytes(dtype, n, k, data, mapping_);
}

absl::StatusOr<std::unique_ptr<WeightCacheWriter>> WeightCacheWriter::Create(const std::string& path,
                                                                             const std::string& key,
                                                                             std::span<const Shape> shapes,
                                                                             uint64_t folder_max_bytes) {
  std::error_code ec;
  const std::filesystem::path folder = std::filesystem::path(path).parent_path();
  if (!folder.empty()) std::filesystem::create_directories(folder, ec);
  if (ec) return absl::PermissionDeniedError(absl::StrCat("cannot create ", folder.string(), ": ", ec.message()));
  // A writer that died mid-way (crash, kill) left its temporary file behind.
  const std::string stem = std::filesystem::path(path).filename().string() + ".tmp.";
  for (const auto& entry : std::filesystem::directory_iterator(folder.empty() ? "." : folder, ec)) {
    const std::string name = entry.path().filename().string();
    int pid = 0;
    if (name.rfind(stem, 0) == 0 && absl::SimpleAtoi(name.substr(stem.size()), &pid) && pid > 0 &&
        ::kill(pid, 0) != 0 && errno == ESRCH)
      std::filesystem::remove(entry.path(), ec);
  }
  auto writer = std::unique_ptr<WeightCacheWriter>(new WeightCacheWriter());
  writer->path_ = path;
  writer->temp_ = absl::StrCat(path, ".tmp.", ::getpid());
  writer->key_ = key;
  writer->header_bytes_ =
      AlignUp(sizeof(Header) + shapes.size() * sizeof(WeightCacheFile::Entry) + key.size());
  uint64_t offset = writer->header_bytes_;
  for (const Shape& shape : shapes) {
    const uint64_t bytes = cpu::PackedMatrix::PackedBytes(shape.dtype, shape.n, shape.k);
    writer->entries_.push_back({static_cast<uint32_t>(shape.dtype), 0, shape.n, shape.k, offset, bytes});
    offset = AlignUp(offset + bytes);
  }
  writer->evicted_ = PruneFolder(folder.empty() ? "." : folder, path, offset, folder_max_bytes);
  const int fd = ::open(writer->temp_.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Errno("cannot create", writer->temp_);
  if (const int err = ::posix_fallocate(fd, 0, static_cast<off_t>(offset)); err != 0) {
    errno = err;
    absl::Status status = Errno("cannot reserve space for", writer->temp_);
    ::close(fd);
    ::unlink(writer->temp_.c_str());
    return status;
  }
  writer->fd_ = fd;
  return writer;
}

WeightCacheWriter::~WeightCacheWriter() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlink(temp_.c_str());
}

absl::Status WeightCacheWriter::Write(int i, const cpu::PackedMatrix& matrix) {
  if (i < 0 || i >= size() || matrix.is_slice()) return absl::InvalidArgumentError("no such weight cache entry");
  const WeightCacheFile::Entry& e = entries_[i];
  if (e.dtype != static_cast<uint32_t>(matrix.dtype()) || e.n != matrix.n() || e.k != matrix.k() ||
      e.bytes != matrix.bytes())
    return absl::InvalidArgumentError(absl::StrCat("weight cache entry ", i, " has another shape"));
  if (!PWriteAll(fd_, matrix.data(), e.bytes, e.offset)) return Errno("cannot write", temp_);
  return absl::OkStatus();
}

absl::Status WeightCacheWriter::Commit() {
  Header h{};
  std::memcpy(h.magic, kMagic, sizeof(kMagic));
  h.header_bytes = header_bytes_;
  h.num_entries = entries_.size();
  h.key_bytes = key_.size();
  // The header last: a file cut short before this has none, so it is a miss.
  std::string header(header_bytes_, '\0');
  std::memcpy(header.data(), &h, sizeof(h));
  std::memcpy(header.data() + sizeof(h), entries_.data(), entries_.size() * sizeof(WeightCacheFile::Entry));
  std::memcpy(header.data() + sizeof(h) + entries_.size() * sizeof(WeightCacheFile::Entry), key_.data(), key_.size());
  if (!PWriteAll(fd_, header.data(), header.size(), 0)) return Errno("cannot write", temp_);
  ::close(fd_);
  fd_ = -1;
  if (::rename(temp_.c_str(), path_.c_str()) != 0) return Errno("cannot rename into", path_);
  committed_ = true;
  return absl::OkStatus();
}

}  // namespace floe
