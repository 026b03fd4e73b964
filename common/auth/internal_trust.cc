#include "common/auth/internal_trust.h"

#include <grpc/grpc_security_constants.h>
#include <openssl/crypto.h>
#include <openssl/sha.h>

#include <algorithm>
#include <fstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/auth/grpc_auth.h"
#include "common/cli/arg_parser.h"
#include "common/log/log.h"
#include "common/rpc/tls.h"

namespace floe {
namespace {

std::string Sha256(std::string_view data) {
  std::string digest(SHA256_DIGEST_LENGTH, '\0');
  SHA256(reinterpret_cast<const unsigned char*>(data.data()), data.size(),
         reinterpret_cast<unsigned char*>(digest.data()));
  return digest;
}

// The key as the file holds it: one line (a final newline allowed).
absl::StatusOr<std::string> ParseKeyFile(std::string_view text, const std::string& path) {
  auto bad = [&](std::string why) {
    return absl::InvalidArgumentError(absl::StrCat("--internal-key-file ", path, ": ", why));
  };
  std::vector<absl::string_view> lines = absl::StrSplit(absl::string_view(text.data(), text.size()), '\n');
  while (!lines.empty() && absl::StripAsciiWhitespace(lines.back()).empty()) lines.pop_back();
  if (lines.empty()) return bad("empty: it must hold one line, the internal key");
  if (lines.size() > 1) return bad(absl::StrCat(lines.size(), " lines: it must hold one line, the internal key"));
  absl::string_view key = absl::StripTrailingAsciiWhitespace(lines[0]);
  for (size_t i = 0; i < key.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(key[i]);
    if (c < 0x21 || c > 0x7e)
      return bad(absl::StrCat("byte ", i, " of the key is ", static_cast<int>(c),
                              ": a key is printable ASCII without spaces (it travels in a gRPC header)"));
  }
  if (key.size() < kMinInternalKeyBytes)
    return bad(absl::StrCat("the key is ", key.size(), " bytes; it must be at least ", kMinInternalKeyBytes,
                            " (e.g. `openssl rand -hex 32`)"));
  if (key.size() > kMaxInternalKeyBytes)
    return bad(absl::StrCat("the key is ", key.size(), " bytes; the limit is ", kMaxInternalKeyBytes));
  return std::string(key);
}

absl::StatusOr<std::string> ReadKeyFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("--internal-key-file: cannot read ", path));
  // Bounded: a key file is one short line, whatever the path points at.
  std::string text(kMaxInternalKeyBytes + 64, '\0');
  in.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<size_t>(in.gcount()));
  if (in.gcount() == static_cast<std::streamsize>(kMaxInternalKeyBytes + 64))
    return absl::InvalidArgumentError(absl::StrCat("--internal-key-file ", path, ": longer than ",
                                                   kMaxInternalKeyBytes, " bytes, the key limit"));
  return ParseKeyFile(text, path);
}

absl::Status CheckPeers(const std::vector<std::string>& peers) {
  for (size_t i = 0; i < peers.size(); ++i) {
    if (absl::StripAsciiWhitespace(peers[i]).empty())
      return absl::InvalidArgumentError(absl::StrCat("--tls-allowed-peers: entry ", i, " is empty"));
  }
  return absl::OkStatus();
}

// For messages: bounded, whatever a certificate holds.
std::string Describe(const std::vector<std::string>& names) {
  constexpr size_t kShown = 4, kBytes = 128;
  std::vector<std::string> shown;
  for (size_t i = 0; i < names.size() && i < kShown; ++i) shown.push_back(names[i].substr(0, kBytes));
  std::string out = absl::StrJoin(shown, ", ");
  if (names.size() > kShown) absl::StrAppend(&out, ", ... (", names.size(), " in all)");
  return out;
}

}  // namespace

void AddInternalTrustFlags(ArgParser& parser, InternalTrustOptions* options) {
  parser.AddString("internal-key-file", &options->key_file,
                   "file holding one line, the key Floe's services send each other (router -> worker, worker -> "
                   "suffix-cache, ranks) and require on engine calls; empty: internal calls are not checked");
  parser.AddStringList("tls-allowed-peers", &options->allowed_peers,
                       "under mTLS, the certificate subjectAltNames (DNS, URI, IP) accepted on internal calls, "
                       "comma-separated; empty: any certificate the cluster CA signed");
}

std::vector<std::string> InternalTrustFlags(const InternalTrustOptions& options) {
  std::vector<std::string> flags;
  if (!options.key_file.empty()) flags.insert(flags.end(), {"--internal-key-file", options.key_file});
  if (!options.allowed_peers.empty())
    flags.insert(flags.end(), {"--tls-allowed-peers", absl::StrJoin(options.allowed_peers, ",")});
  return flags;
}

absl::Status ValidateInternalTrustOptions(const InternalTrustOptions& options, const TlsOptions& tls) {
  if (!options.allowed_peers.empty() && tls.client_ca_file.empty())
    return absl::InvalidArgumentError(
        "--tls-allowed-peers needs --tls-client-ca (mTLS): without client certificates no caller has a name to "
        "match, and every internal call would be refused");
  return absl::OkStatus();
}

InternalTrust::InternalTrust(std::string key, std::vector<std::string> allowed_peers)
    : key_(std::move(key)), key_digest_(key_.empty() ? "" : Sha256(key_)), allowed_peers_(std::move(allowed_peers)) {}

absl::StatusOr<std::shared_ptr<const InternalTrust>> InternalTrust::Load(const InternalTrustOptions& options) {
  if (absl::Status s = CheckPeers(options.allowed_peers); !s.ok()) return s;
  std::string key;
  if (!options.key_file.empty()) {
    auto read = ReadKeyFile(options.key_file);
    if (!read.ok()) return read.status();
    key = *std::move(read);
  }
  return std::shared_ptr<const InternalTrust>(new InternalTrust(std::move(key), options.allowed_peers));
}

absl::StatusOr<std::shared_ptr<const InternalTrust>> InternalTrust::FromKey(std::string key,
                                                                            std::vector<std::string> allowed_peers) {
  if (absl::Status s = CheckPeers(allowed_peers); !s.ok()) return s;
  auto parsed = ParseKeyFile(key, "(key)");
  if (!parsed.ok()) return parsed.status();
  return std::shared_ptr<const InternalTrust>(new InternalTrust(*std::move(parsed), std::move(allowed_peers)));
}

void InternalTrust::Attach(grpc::ClientContext* context) const {
  if (has_key()) context->AddMetadata("authorization", absl::StrCat("Bearer ", key_));
}

grpc::Status InternalTrust::Authorize(const grpc::ServerContextBase& context, std::string_view call) const {
  if (!enabled()) return grpc::Status::OK;
  if (has_key()) {
    const std::string_view authorization = CallMetadata(context, "authorization");
    if (authorization.empty()) {
      return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                          absl::StrCat(std::string(call),
                                       " is an internal call: it needs the cluster's internal key "
                                       "(\"authorization: Bearer KEY\", --internal-key-file); none was sent"));
    }
    constexpr absl::string_view kBearer = "Bearer ";
    const bool bearer = authorization.size() > kBearer.size() &&
                        absl::StartsWithIgnoreCase(absl::string_view(authorization.data(), kBearer.size()), kBearer);
    // Digests of equal length: the compare takes the same time whatever was sent.
    const std::string sent = Sha256(bearer ? authorization.substr(kBearer.size()) : authorization);
    if (!bearer || CRYPTO_memcmp(sent.data(), key_digest_.data(), sent.size()) != 0) {
      return grpc::Status(grpc::StatusCode::UNAUTHENTICATED,
                          absl::StrCat(std::string(call),
                                       " is an internal call: the key sent is not the cluster's internal key "
                                       "(--internal-key-file)"));
    }
  }
  if (!allowed_peers_.empty()) {
    const std::shared_ptr<const grpc::AuthContext> auth = context.auth_context();
    if (!auth || !auth->IsPeerAuthenticated()) {
      return grpc::Status(grpc::StatusCode::PERMISSION_DENIED,
                          absl::StrCat(std::string(call),
                                       " needs a client certificate naming one of --tls-allowed-peers; the caller "
                                       "presented none"));
    }
    const std::vector<std::string> sans = PeerSubjectAltNames(*auth);
    if (!PeerAllowed(allowed_peers_, sans)) {
      std::vector<std::string> identity;
      for (const grpc::string_ref& v : auth->GetPeerIdentity()) identity.emplace_back(v.data(), v.size());
      return grpc::Status(
          grpc::StatusCode::PERMISSION_DENIED,
          absl::StrCat(std::string(call), ": peer \"", Describe(identity), "\" (subjectAltNames: ",
                       sans.empty() ? "none" : Describe(sans), ") is not in --tls-allowed-peers"));
    }
  }
  return grpc::Status::OK;
}

bool InternalTrust::IsInternalCaller(const grpc::ServerContextBase& context) const {
  return enabled() && Authorize(context, "").ok();
}

grpc::Status AuthorizeAdminOrInternal(const ApiKeys* admin_keys, const InternalTrust* trust,
                                      const grpc::ServerContextBase& context, std::string_view call) {
  if (admin_keys) return ToGrpcStatus(admin_keys->AuthorizeAdmin(CallMetadata(context, "authorization"), call));
  if (trust) return trust->Authorize(context, call);
  return grpc::Status::OK;
}

void LogInternalTrust(const char* component, const InternalTrust* trust) {
  if (trust && trust->enabled()) {
    LogEvent(LogLevel::kInfo, component, "internal_trust",
             {{"enabled", true},
              {"internal_key", trust->has_key()},
              {"allowed_peers", static_cast<int64_t>(trust->allowed_peers().size())}});
  } else {
    LogEvent(LogLevel::kWarning, component, "internal_trust",
             {{"enabled", false},
              {"why", "no --internal-key-file: workers and the suffix cache take engine calls from any caller"}});
  }
}

std::vector<std::string> PeerSubjectAltNames(const grpc::AuthContext& auth) {
  std::vector<std::string> out;
  for (const char* property : {GRPC_X509_SAN_PROPERTY_NAME, GRPC_PEER_DNS_PROPERTY_NAME, GRPC_PEER_URI_PROPERTY_NAME,
                               GRPC_PEER_IP_PROPERTY_NAME, GRPC_PEER_EMAIL_PROPERTY_NAME}) {
    for (const grpc::string_ref& v : auth.FindPropertyValues(property)) {
      std::string name(v.data(), v.size());
      if (std::find(out.begin(), out.end(), name) == out.end()) out.push_back(std::move(name));
    }
  }
  return out;
}

bool PeerAllowed(const std::vector<std::string>& allowed, const std::vector<std::string>& sans) {
  for (const std::string& san : sans) {
    if (std::find(allowed.begin(), allowed.end(), san) != allowed.end()) return true;
  }
  return false;
}

bool TenantOwnsNamespace(std::string_view tenant, std::string_view ns) {
  if (tenant.empty() || !absl::StartsWith(absl::string_view(ns.data(), ns.size()),
                                          absl::string_view(tenant.data(), tenant.size())))
    return false;
  return ns.size() == tenant.size() || ns[tenant.size()] == '/';
}

}  // namespace floe
