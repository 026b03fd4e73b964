#include "common/metrics/metrics_server.h"

#include "absl/strings/str_cat.h"

namespace floe {
namespace {

constexpr int kThreads = 8;
constexpr int kIdleMs = 2000;

}  // namespace

absl::StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::Start(const std::string& host, int port) {
  std::unique_ptr<MetricsServer> server(new MetricsServer());
  try {
    // civetweb serves a connection per thread for as long as the client keeps
    // it: with its defaults (2 threads, 30 s to send a request) two idle
    // connections blinded /metrics. More threads, and a connection that
    // sends nothing, or idles between keep-alive requests, is closed after
    // kIdleMs.
    server->exposer_ = std::make_unique<prometheus::Exposer>(std::vector<std::string>{
        "listening_ports", absl::StrCat(host, ":", port), "num_threads", std::to_string(kThreads),
        "request_timeout_ms", std::to_string(kIdleMs), "keep_alive_timeout_ms", std::to_string(kIdleMs)});
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat("metrics: cannot listen on ", host, ":", port, ": ", e.what()));
  }
  server->registry_ = std::make_shared<prometheus::Registry>();
  server->exposer_->RegisterCollectable(server->registry_);
  std::vector<int> ports = server->exposer_->GetListeningPorts();
  if (ports.empty()) return absl::UnavailableError("metrics: no listening port");
  server->url_ = absl::StrCat("http://", host, ":", ports[0], "/metrics");
  return server;
}

void MetricsServer::Add(const std::shared_ptr<prometheus::Collectable>& collectable) {
  extra_.push_back(collectable);
  exposer_->RegisterCollectable(collectable);
}

const std::vector<double>& TtftBuckets() {
  static const std::vector<double> kBuckets = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,  0.25,  0.5,  0.75,
                                               1.0,   2.5,   5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0};
  return kBuckets;
}

const std::vector<double>& InterTokenBuckets() {
  static const std::vector<double> kBuckets = {0.01, 0.025, 0.05, 0.075, 0.1,  0.15, 0.2,  0.3,  0.4, 0.5,
                                               0.75, 1.0,   2.5,  5.0,   7.5,  10.0, 20.0, 40.0, 80.0};
  return kBuckets;
}

const std::vector<double>& RequestLatencyBuckets() {
  static const std::vector<double> kBuckets = {0.3,  0.5,  0.8,  1.0,  1.5,   2.0,   2.5,   5.0,   10.0,   15.0,  20.0,
                                               30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};
  return kBuckets;
}

std::vector<double> OneTwoFiveBuckets(double max_value) {
  std::vector<double> buckets;
  for (double scale = 1; scale <= max_value; scale *= 10) {
    for (double m : {1.0, 2.0, 5.0}) {
      if (m * scale <= max_value) buckets.push_back(m * scale);
    }
  }
  return buckets;
}

}  // namespace floe
