#include "services/cli/internal_key_file.h"

#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"

namespace floe {
namespace {

absl::Status Errno(const std::string& what) {
  return absl::InternalError(absl::StrCat("internal key: ", what, ": ", std::strerror(errno)));
}

absl::StatusOr<std::string> RandomBytes(int n) {
  const int fd = ::open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Errno("open /dev/urandom");
  std::string bytes(static_cast<size_t>(n), '\0');
  size_t got = 0;
  while (got < bytes.size()) {
    const ssize_t r = ::read(fd, bytes.data() + got, bytes.size() - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      absl::Status s = Errno("read /dev/urandom");
      ::close(fd);
      return s;
    }
    got += static_cast<size_t>(r);
  }
  ::close(fd);
  return bytes;
}

}  // namespace

absl::StatusOr<std::unique_ptr<InternalKeyFile>> InternalKeyFile::Create() {
  auto bytes = RandomBytes(kKeyBytes);
  if (!bytes.ok()) return bytes.status();
  const char* tmp = std::getenv("TMPDIR");
  std::string dir_template = absl::StrCat(tmp && *tmp ? tmp : "/tmp", "/floe-local-XXXXXX");
  if (!::mkdtemp(dir_template.data())) return Errno(absl::StrCat("mkdtemp ", dir_template));
  std::unique_ptr<InternalKeyFile> file(new InternalKeyFile());
  file->dir_ = dir_template;  // from here the destructor cleans up
  file->path_ = file->dir_ + "/internal.key";
  file->key_ = absl::BytesToHexString(*bytes);
  // O_EXCL in a folder only we can enter: nobody slipped a file or a link in.
  const int fd = ::open(file->path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return Errno(absl::StrCat("create ", file->path_));
  size_t written = 0;
  while (written < file->key_.size()) {
    const ssize_t w = ::write(fd, file->key_.data() + written, file->key_.size() - written);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      absl::Status s = Errno(absl::StrCat("write ", file->path_));
      ::close(fd);
      return s;
    }
    written += static_cast<size_t>(w);
  }
  if (::close(fd) != 0) return Errno(absl::StrCat("close ", file->path_));
  return file;
}

InternalKeyFile::~InternalKeyFile() {
  std::error_code ignored;  // a destructor cannot report; the folder is private anyway
  std::filesystem::remove_all(dir_, ignored);
}

}  // namespace floe
