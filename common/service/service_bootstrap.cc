#include "common/service/service_bootstrap.h"

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "common/cli/arg_parser.h"
#include "common/log/log.h"

namespace floe {
namespace {

constexpr int kMaxLivenessIntervalMs = 3600 * 1000;
constexpr int kMaxLivenessFailures = 1000;
// A probe's deadline: the interval, at most this (a healthy listener
// answers in milliseconds; a wedged one never).
constexpr std::chrono::milliseconds kMaxProbeDeadline{3000};

}  // namespace

ServiceBootstrap::ServiceBootstrap(const ServiceSpec& spec) : spec_(spec), startup_(spec.component) {
  flags_.metrics_port = spec.default_metrics_port;
  flags_.drain_timeout_s = spec.default_drain_timeout_s;
}

ServiceBootstrap::~ServiceBootstrap() { StopServing(); }

void ServiceBootstrap::AddFlags(ArgParser& parser) {
  parser.AddString("host", &flags_.host, "address to bind");
  parser.AddInt("port", &flags_.port, "port to bind (0: any free port)");
  parser.AddInt("metrics-port", &flags_.metrics_port, "Prometheus /metrics port (0: any free port; -1: off)");
  parser.AddInt("drain-timeout-s", &flags_.drain_timeout_s, spec_.drain_help);
  AddTlsFlags(parser, &flags_.tls);
  if (spec_.admin_key_help) parser.AddString("admin-key-file", &flags_.admin_key_file, spec_.admin_key_help);
  AddInternalTrustFlags(parser, &flags_.internal_trust);
  parser.AddBool("reflection", &flags_.reflection,
                 "serve gRPC server reflection (off: it lists every method to any caller)");
  parser.AddInt("liveness-probe-interval-ms", &flags_.liveness_probe_interval_ms,
                "the service health-checks its own gRPC port on a fresh connection this often, and exits 1 after "
                "--liveness-probe-failures unanswered checks in a row (a port that stopped accepting; its "
                "supervisor restarts it); 0: off");
  parser.AddInt("liveness-probe-failures", &flags_.liveness_probe_failures,
                "unanswered self health checks in a row that end the process");
}

int ServiceBootstrap::UsageError(const std::string& message) const {
  std::fprintf(stderr, "%s: %s\n", spec_.program, message.c_str());
  return 2;
}

std::optional<int> ServiceBootstrap::Prepare() {
  if (absl::Status s = ValidateTlsOptions(flags_.tls); !s.ok()) return UsageError(std::string(s.message()));
  if (absl::Status s = ValidateInternalTrustOptions(flags_.internal_trust, flags_.tls); !s.ok())
    return UsageError(std::string(s.message()));
  if (flags_.liveness_probe_interval_ms < 0 || flags_.liveness_probe_interval_ms > kMaxLivenessIntervalMs) {
    return UsageError(absl::StrCat("--liveness-probe-interval-ms must be in [0, ", kMaxLivenessIntervalMs, "], got ",
                                   flags_.liveness_probe_interval_ms));
  }
  if (flags_.liveness_probe_failures < 1 || flags_.liveness_probe_failures > kMaxLivenessFailures) {
    return UsageError(absl::StrCat("--liveness-probe-failures must be in [1, ", kMaxLivenessFailures, "], got ",
                                   flags_.liveness_probe_failures));
  }
  auto credentials = MakeChannelCredentials(flags_.tls);
  if (!credentials.ok()) return UsageError(std::string(credentials.status().message()));
  channel_credentials_ = *std::move(credentials);
  auto trust = InternalTrust::Load(flags_.internal_trust);
  if (!trust.ok()) return UsageError(std::string(trust.status().message()));
  internal_trust_ = *std::move(trust);
  LogInternalTrust(spec_.component, internal_trust_.get());
  // Not fatal: a process that cannot raise its limit serves as before.
  if (auto limits = RaiseDescriptorLimit(); limits.ok()) {
    descriptor_limits_ = *limits;
    LogDescriptorLimits(spec_.component, descriptor_limits_);
  } else {
    LogEvent(LogLevel::kWarning, spec_.component, "descriptor_limit",
             {{"error", std::string(limits.status().message())}});
  }
  return std::nullopt;
}

std::optional<int> ServiceBootstrap::Start() {
  if (spec_.admin_key_help) {
    if (!flags_.admin_key_file.empty()) {
      auto loaded = ApiKeys::Load(flags_.admin_key_file);
      if (!loaded.ok()) return UsageError(absl::StrCat("--admin-key-file: ", loaded.status().message()));
      admin_keys_ = *std::move(loaded);
    } else if (!internal_trust_ || !internal_trust_->enabled()) {
      // With internal trust on, the admin calls take the internal key instead.
      LogEvent(LogLevel::kWarning, spec_.component, "admin_calls_open", {{"why", spec_.admin_calls_open_why}});
    }
  }
  if (flags_.metrics_port >= 0) {
    auto started = MetricsServer::Start({.host = flags_.host,
                                          .port = flags_.metrics_port,
                                          .tls_cert_file = flags_.tls.cert_file,
                                          .tls_key_file = flags_.tls.key_file,
                                          .tls_client_ca_file = flags_.tls.client_ca_file});
    if (!started.ok()) {
      LogEvent(LogLevel::kError, spec_.component, "metrics_failed",
               {{"error", std::string(started.status().message())}});
      return 1;
    }
    metrics_server_ = *std::move(started);
    if (!spec_.metrics_line_after_listening) PrintMetricsLine();
  }
  return std::nullopt;
}

void ServiceBootstrap::PrintMetricsLine() const {
  std::printf("metrics %s %s\n", spec_.component, metrics_server_->url().c_str());
}

std::optional<ServiceBootstrap::Serving> ServiceBootstrap::Serve(const std::vector<grpc::Service*>& services,
                                                                 ServerOptions base) {
  base.address = absl::StrCat(flags_.host, ":", flags_.port);
  base.tls = flags_.tls;
  base.reflection = flags_.reflection;
  auto runner = ServerRunner::Start(base, services);
  if (!runner.ok()) {
    LogEvent(LogLevel::kError, spec_.component, "listen_failed", {{"error", std::string(runner.status().message())}});
    return std::nullopt;
  }
  server_ = *std::move(runner);
  std::printf("%s%s\n", spec_.listening_line, server_->address().c_str());
  if (metrics_server_ && spec_.metrics_line_after_listening) PrintMetricsLine();
  std::fflush(stdout);
  startup_.Phase("grpc_start");
  if (flags_.liveness_probe_interval_ms > 0) {
    auto credentials = MakeProbeCredentials(flags_.tls);
    if (credentials.ok()) {
      const std::chrono::milliseconds interval(flags_.liveness_probe_interval_ms);
      watchdog_ = std::make_unique<LivenessWatchdog>(
          spec_.component, ProbeTarget(flags_.host, server_->port()), *std::move(credentials),
          LivenessOptions{.interval = interval,
                          .deadline = std::min(interval, kMaxProbeDeadline),
                          .failures = flags_.liveness_probe_failures});
    } else {
      LogEvent(LogLevel::kWarning, spec_.component, "liveness_unarmed",
               {{"error", std::string(credentials.status().message())}});
    }
  }
  return Serving(this);
}

int ServiceBootstrap::WaitForTermination(const std::function<void()>& tick, std::chrono::milliseconds tick_period) {
  int signal = 0;
  if (!tick) {
    signal = termination_.Wait();
  } else {
    std::optional<int> received;
    while (!(received = termination_.WaitFor(tick_period))) tick();
    signal = *received;
  }
  // A draining server refuses new calls: its own probes would read as a
  // dead listener.
  if (watchdog_) watchdog_->Stop();
  LogEvent(LogLevel::kInfo, spec_.component, "draining", {{"signal", static_cast<int64_t>(signal)}});
  return signal;
}

void ServiceBootstrap::Drain(const std::function<int()>& in_flight) {
  server_->DrainAndShutdown(in_flight, std::chrono::seconds(flags_.drain_timeout_s));
}

int ServiceBootstrap::Stopped() {
  LogEvent(LogLevel::kInfo, spec_.component, "stopped");
  return 0;
}

void ServiceBootstrap::StopServing() {
  watchdog_.reset();
  if (server_) server_->Shutdown(std::chrono::milliseconds(0));
}

}  // namespace floe
