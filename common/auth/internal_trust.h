// Internal trust: the credential calls between Floe's own services carry
// (router -> worker, worker -> suffix-cache, rank -> rank 0's store), which
// a client outside the cluster does not have (issue 41).
//
// Two parts, each optional:
// - the internal key (--internal-key-file FILE: one line, the key itself,
//   since this process sends it): every outgoing internal call carries
//   "authorization: Bearer KEY" (Attach), and the engine-facing calls of a
//   worker, a suffix cache and a rank store refuse a caller without it
//   (UNAUTHENTICATED). Compared in constant time (SHA-256 digests).
// - under mTLS, an allow-list of peer identities (--tls-allowed-peers A,B):
//   the subjectAltNames (DNS, URI, IP, e-mail, as gRPC reports them) of the
//   caller's certificate must include one of them (PERMISSION_DENIED naming
//   the certificate's identity otherwise). Empty: any certificate the
//   cluster CA signed (what --tls-client-ca alone accepts).
//
// How it combines with --admin-key-file (ApiKeys): two separate credentials
// in the same header. Engine calls (Worker.Generate, GetLoad, GetModelInfo;
// the suffix cache's StartRequest, Step, EndRequest, AbortRequest; the rank
// store) need the internal key. Admin calls (Worker.Abort, Snapshot,
// ClearNamespace) need an admin key when --admin-key-file is given (the
// internal key is no admin credential), and the internal key when it is not
// but internal trust is on, so that nothing but Health stays open then. The
// suffix cache's GetStats takes either: the internal key (everything), an
// admin key (everything) or a tenant's key from --admin-key-file (that
// tenant's namespaces only: TenantOwnsNamespace); without internal trust it
// stays open, as the workers then send no credential.
//
// The allow-list is per process and covers every call that checks the key:
// a worker's port serves both the router and its sibling ranks (the rank
// store), so a worker's list names both.
//
// Thread-safety: immutable after Load; any thread may call any method.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "absl/status/statusor.h"

namespace floe {

class ApiKeys;
class ArgParser;
struct TlsOptions;

inline constexpr size_t kMinInternalKeyBytes = 16;
inline constexpr size_t kMaxInternalKeyBytes = 4096;

struct InternalTrustOptions {
  // --internal-key-file FILE: one line, the shared internal key (not a hash:
  // this process sends it).
  std::string key_file;
  // --tls-allowed-peers A,B: under mTLS, SANs (DNS/URI/IP as gRPC reports
  // them) accepted on internal calls; empty: any cert the cluster CA signed.
  std::vector<std::string> allowed_peers;
};

// --internal-key-file, --tls-allowed-peers.
void AddInternalTrustFlags(ArgParser& parser, InternalTrustOptions* options);
// The flags that reproduce `options` on a child process's command line.
std::vector<std::string> InternalTrustFlags(const InternalTrustOptions& options);
// --tls-allowed-peers needs --tls-client-ca: without client certificates no
// caller has a name to match, and every internal call would be refused.
absl::Status ValidateInternalTrustOptions(const InternalTrustOptions& options, const TlsOptions& tls);

class InternalTrust {
 public:
  // Reads the key file; without --internal-key-file and --tls-allowed-peers,
  // a disabled trust (services also take null for that). Errors name the flag: an unreadable file, an empty
  // or short key (< kMinInternalKeyBytes), a longer one than
  // kMaxInternalKeyBytes, a second line, a byte outside printable ASCII or a
  // space (the key travels in a gRPC header); an empty peer name.
  static absl::StatusOr<std::shared_ptr<const InternalTrust>> Load(const InternalTrustOptions& options);
  // The same from the key itself (tests; `floe local` writes the file).
  static absl::StatusOr<std::shared_ptr<const InternalTrust>> FromKey(std::string key,
                                                                      std::vector<std::string> allowed_peers = {});

  // A key or an allow-list is set: internal calls are checked.
  bool enabled() const { return has_key() || !allowed_peers_.empty(); }
  bool has_key() const { return !key_.empty(); }
  const std::vector<std::string>& allowed_peers() const { return allowed_peers_; }

  // Adds "authorization: Bearer KEY" when there is a key.
  void Attach(grpc::ClientContext* context) const;
  // OK when disabled; UNAUTHENTICATED naming `call` when the key is on and
  // the caller did not send it (constant-time compare); PERMISSION_DENIED
  // naming the peer when allowed_peers is set and the caller's certificate
  // SANs (context.auth_context()) match none.
  grpc::Status Authorize(const grpc::ServerContextBase& context, std::string_view call) const;
  // The caller passed Authorize and the trust is enabled (GetStats: it sees
  // everything). False when disabled.
  bool IsInternalCaller(const grpc::ServerContextBase& context) const;

 private:
  InternalTrust(std::string key, std::vector<std::string> allowed_peers);

  std::string key_;         // "" : no key
  std::string key_digest_;  // SHA-256 of key_ (raw bytes)
  std::vector<std::string> allowed_peers_;
};

// The admin calls' check (header comment): with `admin_keys`, an admin key;
// without, the internal key when `trust` is enabled; else open (OK).
grpc::Status AuthorizeAdminOrInternal(const ApiKeys* admin_keys, const InternalTrust* trust,
                                      const grpc::ServerContextBase& context, std::string_view call);

// A start-up log event "internal_trust" from `component`: on (with the
// allow-list's size) or off (a warning: internal calls accept any caller).
void LogInternalTrust(const char* component, const InternalTrust* trust);

// The SANs of a certificate as gRPC's auth context lists them
// (x509_subject_alternative_name, peer_dns/uri/ip/email), de-duplicated.
std::vector<std::string> PeerSubjectAltNames(const grpc::AuthContext& auth);
// Some SAN is on the allow-list (exact, case-sensitive match).
bool PeerAllowed(const std::vector<std::string>& allowed, const std::vector<std::string>& sans);

// The router's tenant mapping (router_service.cc ApplyTenant): a tenant's
// requests run in namespace TENANT or TENANT/NAME (tenant names hold no '/').
bool TenantOwnsNamespace(std::string_view tenant, std::string_view ns);

}  // namespace floe
