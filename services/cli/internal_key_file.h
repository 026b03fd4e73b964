// The internal key of one `floe local` run: the secret its services send
// each other (router -> worker, worker -> suffix-cache, ranks) as a bearer
// token and require from callers (`--internal-key-file`), so a client that
// skips the router cannot call a worker or the suffix cache. A fresh one per
// run, never printed or logged; it lives in a private folder for the run
// and is removed with it.
//
// Thread: not shared; the object owns the folder until destroyed.
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"

namespace floe {

class InternalKeyFile {
 public:
  static constexpr int kKeyBytes = 32;  // random bytes; the file holds them as 64 hex digits

  // Makes a folder only we may enter (0700, mkdtemp under $TMPDIR or /tmp)
  // holding `internal.key` (0600): kKeyBytes from /dev/urandom, lower-case
  // hex, no newline. Errors name the path and the system's reason.
  static absl::StatusOr<std::unique_ptr<InternalKeyFile>> Create();
  ~InternalKeyFile();  // removes the file and its folder
  InternalKeyFile(const InternalKeyFile&) = delete;
  InternalKeyFile& operator=(const InternalKeyFile&) = delete;

  const std::string& path() const { return path_; }
  const std::string& key() const { return key_; }

 private:
  InternalKeyFile() = default;
  std::string dir_;
  std::string path_;
  std::string key_;
};

}  // namespace floe
