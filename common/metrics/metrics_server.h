// Prometheus exposition for a service: a /metrics HTTP endpoint (prometheus-cpp)
// over one registry, plus the histogram buckets vLLM uses, so dashboards
// written for vLLM translate one to one.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <prometheus/collectable.h>
#include <prometheus/exposer.h>
#include <prometheus/registry.h>

#include "absl/status/statusor.h"

namespace floe {

class MetricsServer {
 public:
  // Binds host:port (port 0: any free port) and serves /metrics.
  static absl::StatusOr<std::unique_ptr<MetricsServer>> Start(const std::string& host, int port);

  prometheus::Registry& registry() { return *registry_; }
  // Extra collectables computed at scrape time (e.g. gauges read from an engine).
  void Add(const std::shared_ptr<prometheus::Collectable>& collectable);
  // http://HOST:PORT/metrics
  const std::string& url() const { return url_; }

 private:
  MetricsServer() = default;
  std::unique_ptr<prometheus::Exposer> exposer_;
  std::shared_ptr<prometheus::Registry> registry_;
  std::vector<std::shared_ptr<prometheus::Collectable>> extra_;
  std::string url_;
};

// vLLM's buckets (seconds): time to first token; inter-token latency and time
// per output token; request-level latencies (e2e, queue, prefill, decode).
const std::vector<double>& TtftBuckets();
const std::vector<double>& InterTokenBuckets();
const std::vector<double>& RequestLatencyBuckets();
// 1, 2, 5, 10, 20, 50, ... up to max_value: token-count histograms.
std::vector<double> OneTwoFiveBuckets(double max_value);

}  // namespace floe
