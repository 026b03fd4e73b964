// Prometheus exposition for a service: a /metrics endpoint over one registry
// (prometheus-cpp's data model and text format) served by common/http, so it
// gets that server's bounds (idle and write timeouts, a connection cap in all
// and per client address, no thread held by an idle or slow scraper) and its
// TLS. Also the histogram
// buckets vLLM uses, so dashboards written for vLLM translate one to one.
//
// A scrape collects the registry and every Add()ed collectable on an I/O
// thread of the server: collectables must be thread-safe and quick.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <prometheus/collectable.h>
#include <prometheus/registry.h>

#include "absl/status/statusor.h"
#include "common/http/http_server.h"

namespace floe {

struct MetricsServerOptions {
  std::string host = "127.0.0.1";
  int port = 0;  // 0: any free port
  // PEM files, as the service's other listeners use them: with a certificate
  // the endpoint is HTTPS; with a client CA too, scrapers need a certificate
  // it signed.
  std::string tls_cert_file, tls_key_file, tls_client_ca_file;
};

class MetricsServer {
 public:
  // Binds and serves GET /metrics.
  static absl::StatusOr<std::unique_ptr<MetricsServer>> Start(const MetricsServerOptions& options);
  static absl::StatusOr<std::unique_ptr<MetricsServer>> Start(const std::string& host, int port) {
    return Start(MetricsServerOptions{.host = host, .port = port});
  }
  ~MetricsServer();

  prometheus::Registry& registry() { return *registry_; }
  // Extra collectables computed at scrape time (e.g. gauges read from an engine).
  void Add(const std::shared_ptr<prometheus::Collectable>& collectable);
  // http://HOST:PORT/metrics, or https:// under TLS.
  const std::string& url() const { return url_; }
  // The exposition text a scrape returns now.
  std::string Scrape() const;

 private:
  MetricsServer() = default;
  std::shared_ptr<prometheus::Registry> registry_;
  mutable std::mutex mu_;  // guards extra_ (Add() may race a scrape)
  std::vector<std::shared_ptr<prometheus::Collectable>> extra_;
  std::unique_ptr<http::Server> http_;
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
