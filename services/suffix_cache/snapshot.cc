#include "services/suffix_cache/snapshot.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "common/bytes/byte_codec.h"

namespace floe::suffix_cache {
namespace {

constexpr char kMagic[8] = {'F', 'L', 'O', 'E', 'S', 'U', 'F', 'X'};
constexpr uint32_t kVersion = 2;  // newest written; 1 still read
constexpr size_t kHeaderBytes = 8 + 4 + 4 + 8 + 8;

// `h` continues a hash over earlier bytes (no copy to hash two parts).
uint64_t Fnv1a64(absl::string_view bytes, uint64_t h = 0xcbf29ce484222325ull) {
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

void PutString(std::string* out, absl::string_view s) { AppendCounted<uint32_t>(out, s.data(), s.size()); }

absl::Status Lost(const ByteReader& r) { return absl::DataLossError(absl::StrCat("snapshot payload ", r.error())); }

}  // namespace

std::string EncodeSnapshot(const SnapshotData& data, uint32_t version) {
  const bool v2 = version != 1;
  // The header's length and checksum are patched in at the end, so the
  // payload (tree images: hundreds of MB) is written once, in place.
  size_t reserve = kHeaderBytes + 4;
  for (const SnapshotNamespace& ns : data.namespaces) {
    reserve += 16 + ns.name.size() + ns.tree_image.size();
    for (const SnapshotResponse& r : ns.responses) reserve += 12 + r.request_id.size() + 4 * r.tokens.size();
  }
  std::string out;
  out.reserve(reserve);
  out.append(kMagic, sizeof(kMagic));
  AppendPod<uint32_t>(&out, v2 ? kVersion : 1);
  AppendPod<uint32_t>(&out, data.max_depth);
  AppendPod<uint64_t>(&out, 0);  // payload bytes, patched below
  AppendPod<uint64_t>(&out, 0);  // checksum, patched below
  AppendPod<uint32_t>(&out, static_cast<uint32_t>(data.namespaces.size()));
  for (const SnapshotNamespace& ns : data.namespaces) {
    PutString(&out, ns.name);
    AppendPod<uint32_t>(&out, static_cast<uint32_t>(ns.responses.size()));
    for (const SnapshotResponse& r : ns.responses) {
      PutString(&out, r.request_id);
      if (v2) AppendPod<int32_t>(&out, r.seq_id);
      AppendCounted<uint32_t>(&out, r.tokens.data(), r.tokens.size());
    }
    if (v2) AppendCounted<uint64_t>(&out, ns.tree_image.data(), ns.tree_image.size());
  }
  const uint64_t payload_len = out.size() - kHeaderBytes;
  std::memcpy(out.data() + kHeaderBytes - 16, &payload_len, sizeof(payload_len));
  const absl::string_view all(out);
  // Covers the header fields too.
  const uint64_t checksum = Fnv1a64(all.substr(kHeaderBytes), Fnv1a64(all.substr(0, kHeaderBytes - 8)));
  std::memcpy(out.data() + kHeaderBytes - 8, &checksum, sizeof(checksum));
  return out;
}

absl::StatusOr<SnapshotData> DecodeSnapshot(absl::string_view bytes) {
  if (bytes.size() < kHeaderBytes) {
    return absl::DataLossError(absl::StrCat("snapshot is ", bytes.size(), " bytes, shorter than its ",
                                            kHeaderBytes, "-byte header"));
  }
  if (std::memcmp(bytes.data(), kMagic, sizeof(kMagic)) != 0) {
    return absl::DataLossError("snapshot magic is not FLOESUFX");
  }
  ByteReader header(bytes.substr(8, kHeaderBytes - 8));  // long enough: checked above
  uint32_t version = 0;
  uint64_t payload_len = 0, checksum = 0;
  SnapshotData data;
  header.Pod(&version, "version");
  header.Pod(&data.max_depth, "max_depth");
  header.Pod(&payload_len, "payload length");
  header.Pod(&checksum, "checksum");
  if (version != 1 && version != kVersion) {
    return absl::DataLossError(absl::StrCat("snapshot version ", version, " is not 1 or ", kVersion));
  }
  absl::string_view payload = bytes.substr(kHeaderBytes);
  if (payload.size() != payload_len) {
    return absl::DataLossError(absl::StrCat("snapshot payload is ", payload.size(),
                                            " bytes, header says ", payload_len));
  }
  if (Fnv1a64(payload, Fnv1a64(bytes.substr(0, kHeaderBytes - 8))) != checksum) {
    return absl::DataLossError("snapshot checksum mismatch");
  }
  ByteReader r(payload);
  uint32_t num_ns = 0;
  if (!r.Pod(&num_ns, "namespace count")) return Lost(r);
  for (uint32_t i = 0; i < num_ns; ++i) {
    SnapshotNamespace ns;
    uint32_t num_resp = 0;
    if (!r.Counted<uint32_t>(&ns.name, "namespace name") || !r.Pod(&num_resp, "response count")) return Lost(r);
    for (uint32_t j = 0; j < num_resp; ++j) {
      SnapshotResponse resp;
      if (!r.Counted<uint32_t>(&resp.request_id, "request id") ||
          (version >= 2 && !r.Pod(&resp.seq_id, "seq id")) || !r.Counted<uint32_t>(&resp.tokens, "tokens")) {
        return Lost(r);
      }
      ns.responses.push_back(std::move(resp));
    }
    if (version >= 2 && !r.Counted<uint64_t>(&ns.tree_image, "tree image")) return Lost(r);
    data.namespaces.push_back(std::move(ns));
  }
  if (!r.done()) return absl::DataLossError("snapshot payload has trailing bytes");
  return data;
}

absl::Status WriteFileAtomically(const std::string& path, absl::string_view bytes) {
  const std::string tmp = absl::StrCat(path, ".tmp.", ::getpid());
  auto fail = [&](const char* step) {
    const int err = errno;
    ::unlink(tmp.c_str());
    return absl::InternalError(absl::StrCat(step, " ", tmp, ": ", std::strerror(err)));
  };
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return fail("open");
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      ::close(fd);
      return fail("write");
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0) {
    ::close(fd);
    return fail("fsync");
  }
  ::close(fd);
  if (::rename(tmp.c_str(), path.c_str()) != 0) return fail("rename");
  const std::string dir = std::filesystem::path(path).parent_path().string();
  int dfd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  const std::streamoff size = in.tellg();
  if (size < 0) return absl::InternalError(absl::StrCat("cannot size ", path));
  std::string bytes(static_cast<size_t>(size), '\0');  // one read, no stream copies
  in.seekg(0);
  if (!in.read(bytes.data(), size)) return absl::InternalError(absl::StrCat("cannot read ", path));
  return bytes;
}

}  // namespace floe::suffix_cache
