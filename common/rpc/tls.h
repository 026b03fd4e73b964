// TLS for every Floe listener and channel, from PEM files named on the
// command line. One TlsOptions per process serves both directions: its
// certificate is the server certificate of its listeners and the client
// certificate of its outgoing channels (so mTLS between services needs no
// second pair), and `ca_file` verifies the servers it calls.
//
// Without a certificate and without a CA everything stays plaintext, as on a
// laptop or inside a trusted pod network; with them, a plaintext peer is
// refused. Files are read at start: a missing or unreadable file is an error
// naming the flag, never a silent fallback to plaintext.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <grpcpp/security/credentials.h>
#include <grpcpp/security/server_credentials.h>

#include "absl/status/statusor.h"

namespace floe {

class ArgParser;

struct TlsOptions {
  std::string cert_file;       // --tls-cert: this process's certificate chain (PEM)
  std::string key_file;        // --tls-key: its private key (PEM)
  std::string client_ca_file;  // --tls-client-ca: listeners require client certificates signed by it (mTLS)
  std::string ca_file;         // --tls-ca: roots that verify the servers this process calls

  // Listeners speak TLS.
  bool server_enabled() const { return !cert_file.empty(); }
  // Outgoing channels speak TLS: a CA to verify with, or a certificate of
  // our own (a TLS cluster calls its peers over TLS too).
  bool client_enabled() const { return !ca_file.empty() || !cert_file.empty(); }
  // The roots outgoing channels trust: --tls-ca, else --tls-client-ca (one
  // cluster CA signs everything), else the system's.
  const std::string& roots_file() const { return ca_file.empty() ? client_ca_file : ca_file; }
};

// --tls-cert, --tls-key, --tls-client-ca, --tls-ca.
void AddTlsFlags(ArgParser& parser, TlsOptions* options);
// Both or neither of cert and key; a client CA needs a certificate; every
// named file readable.
absl::Status ValidateTlsOptions(const TlsOptions& options);

// The credentials a listener uses (insecure when !server_enabled()).
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(const TlsOptions& options);
// The credentials an outgoing channel uses (insecure when !client_enabled()).
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeChannelCredentials(const TlsOptions& options);

// The flags that reproduce `options` on a child process's command line.
std::vector<std::string> TlsFlags(const TlsOptions& options);

absl::StatusOr<std::string> ReadPemFile(const std::string& path, const std::string& flag);

}  // namespace floe
