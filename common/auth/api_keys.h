// API keys (--api-key-file on the router, --admin-key-file on workers and
// the suffix-cache): one line per key, "SHA256 TENANT [admin]", the key's
// SHA-256 in hex (the file never holds a key), the tenant it belongs to, and
// optionally its admin right; blank lines and `#` comments are skipped.
// Clients send "authorization: Bearer KEY" (gRPC metadata or HTTP header).
// On the router a tenant's requests get its suffix-cache namespace and
// prefix-cache salt, so tenants never see each other's drafts or cached
// prefixes; on the other services only admin keys open the admin calls.
//
// Immutable after Load: thread-safe.
#pragma once

#include <string>
#include <string_view>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"

namespace floe {

inline constexpr int kMaxTenantBytes = 64;

struct Tenant {
  std::string name;
  bool admin = false;
};

class ApiKeys {
 public:
  static absl::StatusOr<ApiKeys> Load(const std::string& path);
  // The file's text; errors name the line.
  static absl::StatusOr<ApiKeys> Parse(std::string_view text);

  // The tenant of an "authorization" value ("Bearer KEY");
  // UNAUTHENTICATED saying what is missing or wrong (never echoing the key).
  absl::StatusOr<const Tenant*> Authenticate(std::string_view authorization) const;
  // As Authenticate, and PERMISSION_DENIED unless the key is an admin's;
  // `call` names what was refused.
  absl::Status AuthorizeAdmin(std::string_view authorization, std::string_view call) const;
  size_t size() const { return by_digest_.size(); }

 private:
  absl::flat_hash_map<std::string, Tenant> by_digest_;  // lower-case hex SHA-256
};

// Lower-case hex SHA-256 of `data`.
std::string Sha256Hex(std::string_view data);

}  // namespace floe
