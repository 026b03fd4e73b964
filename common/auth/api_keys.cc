#include "common/auth/api_keys.h"

#include <openssl/sha.h>

#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace floe {

std::string Sha256Hex(std::string_view data) {
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(data.data()), data.size(), digest);
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  for (unsigned char b : digest) {
    out += kHex[b >> 4];
    out += kHex[b & 15];
  }
  return out;
}

absl::StatusOr<ApiKeys> ApiKeys::Load(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("--api-key-file: cannot read ", path));
  std::stringstream text;
  text << in.rdbuf();
  auto keys = Parse(text.str());
  if (!keys.ok()) return absl::InvalidArgumentError(absl::StrCat("--api-key-file ", path, ": ", keys.status().message()));
  return keys;
}

absl::StatusOr<ApiKeys> ApiKeys::Parse(std::string_view text) {
  ApiKeys keys;
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(absl::string_view(text.data(), text.size()), '\n')) {
    ++line_number;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line[0] == '#') continue;
    std::vector<std::string> fields = absl::StrSplit(line, absl::ByAnyChar(" \t\r"), absl::SkipEmpty());
    auto bad = [&](std::string why) {
      return absl::InvalidArgumentError(absl::StrCat("line ", line_number, ": ", why,
                                                     " (expected: SHA256_HEX TENANT [admin])"));
    };
    if (fields.size() < 2 || fields.size() > 3) return bad(absl::StrCat(fields.size(), " fields"));
    std::string digest = absl::AsciiStrToLower(fields[0]);
    if (digest.size() != 64 || digest.find_first_not_of("0123456789abcdef") != std::string::npos)
      return bad("the first field must be a key's SHA-256 in hex (64 digits), not the key");
    const std::string& tenant = fields[1];
    if (tenant.size() > static_cast<size_t>(kMaxTenantBytes) ||
        tenant.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.") !=
            std::string::npos)
      return bad(absl::StrCat("tenant must be 1..", kMaxTenantBytes, " of [A-Za-z0-9._-]"));
    if (fields.size() == 3 && fields[2] != "admin") return bad(absl::StrCat("unknown flag \"", fields[2], "\""));
    if (!keys.by_digest_.emplace(digest, Tenant{tenant, fields.size() == 3}).second)
      return bad("the same key appears twice");
  }
  if (keys.by_digest_.empty()) return absl::InvalidArgumentError("no keys");
  return keys;
}

absl::StatusOr<const Tenant*> ApiKeys::Authenticate(std::string_view authorization) const {
  if (authorization.empty())
    return absl::UnauthenticatedError("missing API key: send the header \"authorization: Bearer KEY\"");
  constexpr std::string_view kBearer = "Bearer ";
  if (authorization.size() <= kBearer.size() ||
      !absl::StartsWithIgnoreCase(absl::string_view(authorization.data(), kBearer.size()), "Bearer "))
    return absl::UnauthenticatedError("authorization must be \"Bearer KEY\"");
  auto it = by_digest_.find(Sha256Hex(authorization.substr(kBearer.size())));
  if (it == by_digest_.end()) return absl::UnauthenticatedError("invalid API key");
  return &it->second;
}

}  // namespace floe

namespace floe {

absl::Status ApiKeys::AuthorizeAdmin(std::string_view authorization, std::string_view call) const {
  auto tenant = Authenticate(authorization);
  if (!tenant.ok()) return tenant.status();
  if (!(*tenant)->admin)
    return absl::PermissionDeniedError(absl::StrCat(std::string(call), " needs an admin key (the key of tenant \"", (*tenant)->name,
                                                    "\" is not one)"));
  return absl::OkStatus();
}

}  // namespace floe
