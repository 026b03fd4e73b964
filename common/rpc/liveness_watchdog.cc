#include "common/rpc/liveness_watchdog.h"

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/security/tls_certificate_provider.h>
#include <grpcpp/security/tls_certificate_verifier.h>
#include <grpcpp/security/tls_credentials_options.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <cstdlib>
#include <future>

#include "absl/strings/str_cat.h"
#include "common/log/log.h"

namespace floe {

LivenessWatchdog::LivenessWatchdog(const char* component, std::string target, ProbeCredentials credentials,
                                   LivenessOptions options, std::function<void()> on_dead)
    : component_(component),
      target_(std::move(target)),
      credentials_(std::move(credentials)),
      options_(options),
      on_dead_(on_dead ? std::move(on_dead) : [] { std::_Exit(1); }),
      thread_([this] { Run(); }) {}

LivenessWatchdog::~LivenessWatchdog() { Stop(); }

void LivenessWatchdog::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable() && thread_.get_id() != std::this_thread::get_id()) thread_.join();
}

bool LivenessWatchdog::armed() const {
  std::lock_guard<std::mutex> lock(mu_);
  return armed_;
}

int LivenessWatchdog::probes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return probes_;
}

grpc::Status CheckHealth(const std::shared_ptr<grpc::Channel>& channel, std::chrono::milliseconds deadline) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + deadline);
  grpc::Slice no_bytes;
  grpc::ByteBuffer request(&no_bytes, 1);
  grpc::ByteBuffer response;
  std::promise<grpc::Status> done;
  grpc::GenericStub(channel).UnaryCall(&context, kHealthCheckMethod, grpc::StubOptions(), &request, &response,
                                       [&done](grpc::Status status) { done.set_value(std::move(status)); });
  // The deadline ends the call; the callback runs once, always.
  return done.get_future().get();
}

grpc::Status LivenessWatchdog::Probe() {
  grpc::ChannelArguments args;
  // A connection of its own each time: the global subchannel pool would
  // hand back a connection made before the listener died.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  if (!credentials_.target_name.empty()) args.SetSslTargetNameOverride(credentials_.target_name);
  return CheckHealth(grpc::CreateCustomChannel(target_, credentials_.credentials, args), options_.deadline);
}

void LivenessWatchdog::Run() {
  int failures = 0;
  bool warned_unarmed = false;
  std::string last_error;
  for (;;) {
    const auto next = std::chrono::steady_clock::now() + options_.interval;
    const grpc::Status status = Probe();
    bool armed;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_) return;  // a probe of a draining server proves nothing
      ++probes_;
      if (status.ok() && !armed_) {
        armed_ = true;
        LogEvent(LogLevel::kInfo, component_, "liveness_armed",
                 {{"listener", target_}, {"interval_ms", static_cast<int64_t>(options_.interval.count())}});
      }
      armed = armed_;
    }
    if (status.ok()) {
      failures = 0;
    } else {
      ++failures;
      last_error = absl::StrCat(static_cast<int>(status.error_code()), ": ", status.error_message());
    }
    if (failures >= options_.failures) {
      if (armed) {
        LogEvent(LogLevel::kError, component_, "liveness_failed",
                 {{"listener", target_},
                  {"failures", static_cast<int64_t>(failures)},
                  {"error", last_error},
                  {"effect", "exit 1: the listener stopped answering its own health checks"}});
        on_dead_();
        return;
      }
      if (!warned_unarmed) {
        warned_unarmed = true;
        LogEvent(LogLevel::kWarning, component_, "liveness_unarmed",
                 {{"listener", target_},
                  {"error", last_error},
                  {"effect", "no self-probe has answered yet: the watchdog waits for one before it judges"}});
      }
    }
    std::unique_lock<std::mutex> lock(mu_);
    if (wake_.wait_until(lock, next, [this] { return stopping_; })) return;
  }
}

std::string ProbeTarget(const std::string& host, int port) {
  if (host.empty() || host == "0.0.0.0") return absl::StrCat("127.0.0.1:", port);
  // A v6 wildcard may have fallen back to v4 where the host has no IPv6:
  // "localhost" resolves to whichever loopback there is.
  if (host == "::" || host == "[::]") return absl::StrCat("localhost:", port);
  return absl::StrCat(host, ":", port);
}

absl::StatusOr<ProbeCredentials> MakeProbeCredentials(const TlsOptions& tls) {
  if (!tls.server_enabled()) return ProbeCredentials{grpc::InsecureChannelCredentials(), ""};
  auto cert = ReadPemFile(tls.cert_file, "tls-cert");
  if (!cert.ok()) return cert.status();
  grpc::experimental::TlsChannelCredentialsOptions options;
  options.set_verify_server_certs(false);
  options.set_check_call_host(false);
  options.set_certificate_verifier(std::make_shared<grpc::experimental::NoOpCertificateVerifier>());
  if (!tls.client_ca_file.empty()) {
    auto key = ReadPemFile(tls.key_file, "tls-key");
    if (!key.ok()) return key.status();
    options.set_certificate_provider(std::make_shared<grpc::experimental::StaticDataCertificateProvider>(
        std::vector<grpc::experimental::IdentityKeyCertPair>{{*std::move(key), *cert}}));
    options.watch_identity_key_cert_pairs();
  }
  auto credentials = grpc::experimental::TlsCredentials(options);
  if (!credentials) return absl::InternalError("liveness probe: cannot make TLS channel credentials");
  return ProbeCredentials{std::move(credentials), CertificateName(*cert)};
}

std::string CertificateName(const std::string& pem) {
  std::unique_ptr<BIO, decltype(&BIO_free)> bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())), BIO_free);
  if (!bio) return "";
  std::unique_ptr<X509, decltype(&X509_free)> cert(PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr), X509_free);
  if (!cert) return "";
  std::string name;
  auto* sans = static_cast<GENERAL_NAMES*>(X509_get_ext_d2i(cert.get(), NID_subject_alt_name, nullptr, nullptr));
  for (int i = 0; sans && i < sk_GENERAL_NAME_num(sans) && name.empty(); ++i) {
    const GENERAL_NAME* san = sk_GENERAL_NAME_value(sans, i);
    if (san->type == GEN_DNS) {
      const ASN1_STRING* dns = san->d.dNSName;
      name.assign(reinterpret_cast<const char*>(ASN1_STRING_get0_data(dns)), ASN1_STRING_length(dns));
    } else if (san->type == GEN_IPADD && san->d.iPAddress->length == 4) {
      const unsigned char* ip = ASN1_STRING_get0_data(san->d.iPAddress);
      name = absl::StrCat(ip[0], ".", ip[1], ".", ip[2], ".", ip[3]);
    }
  }
  GENERAL_NAMES_free(sans);
  if (name.empty()) {
    char cn[256] = {0};
    const int n = X509_NAME_get_text_by_NID(X509_get_subject_name(cert.get()), NID_commonName, cn, sizeof(cn));
    if (n > 0) name.assign(cn, static_cast<size_t>(n));
  }
  // "*.svc.cluster.local" matches "x.svc.cluster.local", not itself.
  if (name.rfind("*.", 0) == 0) name[0] = 'x';
  return name;
}

}  // namespace floe
