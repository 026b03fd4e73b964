#include "common/rpc/tls.h"

#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/cli/arg_parser.h"

namespace floe {

// PEM files are small; anything beyond this is not one.
constexpr size_t kMaxPemBytes = 1 << 20;

absl::StatusOr<std::string> ReadPemFile(const std::string& path, const std::string& flag) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("--", flag, ": cannot read ", path));
  std::ostringstream contents;
  contents << in.rdbuf();
  std::string pem = contents.str();
  if (pem.size() > kMaxPemBytes)
    return absl::InvalidArgumentError(absl::StrCat("--", flag, ": ", path, " is over ", kMaxPemBytes, " bytes"));
  if (pem.find("-----BEGIN ") == std::string::npos)
    return absl::InvalidArgumentError(absl::StrCat("--", flag, ": ", path, " holds no PEM block"));
  return pem;
}

void AddTlsFlags(ArgParser& parser, TlsOptions* options) {
  parser.AddString("tls-cert", &options->cert_file, "TLS certificate chain (PEM) of every listener; also the client certificate towards peers");
  parser.AddString("tls-key", &options->key_file, "private key (PEM) of --tls-cert");
  parser.AddString("tls-client-ca", &options->client_ca_file, "require client certificates signed by this CA (PEM): mTLS");
  parser.AddString("tls-ca", &options->ca_file, "CA (PEM) that verifies the servers this process calls (default: --tls-client-ca, else the system's)");
}

absl::Status ValidateTlsOptions(const TlsOptions& o) {
  if (o.cert_file.empty() != o.key_file.empty())
    return absl::InvalidArgumentError("--tls-cert and --tls-key go together");
  if (!o.client_ca_file.empty() && o.cert_file.empty())
    return absl::InvalidArgumentError("--tls-client-ca needs --tls-cert and --tls-key (mTLS is on top of TLS)");
  const std::pair<const std::string*, const char*> files[] = {
      {&o.cert_file, "tls-cert"}, {&o.key_file, "tls-key"}, {&o.client_ca_file, "tls-client-ca"}, {&o.ca_file, "tls-ca"}};
  for (const auto& [path, flag] : files) {
    if (path->empty()) continue;
    if (auto pem = ReadPemFile(*path, flag); !pem.ok()) return pem.status();
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(const TlsOptions& o) {
  if (!o.server_enabled()) return grpc::InsecureServerCredentials();
  if (absl::Status s = ValidateTlsOptions(o); !s.ok()) return s;
  grpc::SslServerCredentialsOptions ssl(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  grpc::SslServerCredentialsOptions::PemKeyCertPair pair;
  pair.cert_chain = *ReadPemFile(o.cert_file, "tls-cert");
  pair.private_key = *ReadPemFile(o.key_file, "tls-key");
  ssl.pem_key_cert_pairs.push_back(std::move(pair));
  if (!o.client_ca_file.empty()) {
    ssl.pem_root_certs = *ReadPemFile(o.client_ca_file, "tls-client-ca");
    ssl.client_certificate_request = GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
  }
  return grpc::SslServerCredentials(ssl);
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeChannelCredentials(const TlsOptions& o) {
  if (!o.client_enabled()) return grpc::InsecureChannelCredentials();
  if (absl::Status s = ValidateTlsOptions(o); !s.ok()) return s;
  grpc::SslCredentialsOptions ssl;
  if (!o.roots_file().empty()) {
    auto roots = ReadPemFile(o.roots_file(), o.ca_file.empty() ? "tls-client-ca" : "tls-ca");
    if (!roots.ok()) return roots.status();
    ssl.pem_root_certs = *std::move(roots);
  }
  if (!o.cert_file.empty()) {
    ssl.pem_cert_chain = *ReadPemFile(o.cert_file, "tls-cert");
    ssl.pem_private_key = *ReadPemFile(o.key_file, "tls-key");
  }
  return grpc::SslCredentials(ssl);
}

std::vector<std::string> TlsFlags(const TlsOptions& o) {
  std::vector<std::string> flags;
  const std::pair<const std::string*, const char*> files[] = {
      {&o.cert_file, "--tls-cert"}, {&o.key_file, "--tls-key"}, {&o.client_ca_file, "--tls-client-ca"}, {&o.ca_file, "--tls-ca"}};
  for (const auto& [path, flag] : files) {
    if (path->empty()) continue;
    flags.push_back(flag);
    flags.push_back(*path);
  }
  return flags;
}

}  // namespace floe
