#include "common/metrics/metrics_server.h"

#include <chrono>
#include <iterator>
#include <utility>

#include <prometheus/text_serializer.h>

#include "absl/strings/str_cat.h"

namespace floe {
namespace {

// A scraper is answered at once or dropped: nothing it does holds a thread
// (issue 17's probe blinded civetweb's thread-per-connection exposer with two
// idle connections), and a few hundred connections are far more than the
// scrapers of one pod. A scraper needs one or two at a time, so one address
// gets a few: a client holding connections cannot starve scrapers elsewhere
// (issue 41: 256 from one client failed 27 of 30 scrapes).
constexpr int kMaxConnections = 256;
constexpr int kMaxConnectionsPerClient = 8;
constexpr std::chrono::seconds kIdleTimeout{10};
constexpr std::chrono::seconds kWriteTimeout{10};

}  // namespace

absl::StatusOr<std::unique_ptr<MetricsServer>> MetricsServer::Start(const MetricsServerOptions& options) {
  std::unique_ptr<MetricsServer> server(new MetricsServer());
  server->registry_ = std::make_shared<prometheus::Registry>();
  http::ServerOptions http_options;
  http_options.host = options.host;
  http_options.port = options.port;
  http_options.threads = 1;
  http_options.max_body_bytes = 4 << 10;  // a GET has no body
  http_options.max_connections = kMaxConnections;
  http_options.max_connections_per_client = kMaxConnectionsPerClient;
  http_options.idle_timeout = kIdleTimeout;
  http_options.write_timeout = kWriteTimeout;
  http_options.tls_cert_file = options.tls_cert_file;
  http_options.tls_key_file = options.tls_key_file;
  http_options.tls_client_ca_file = options.tls_client_ca_file;
  MetricsServer* self = server.get();  // the server outlives its http_ (destroyed first)
  auto http = http::Server::Start(http_options, [self](http::Request request, std::shared_ptr<http::Exchange> exchange) {
    http::Response response;
    response.content_type = "text/plain; version=0.0.4; charset=utf-8";
    if (request.path != "/metrics") {
      response.status = 404;
      response.body = "not found: only /metrics is served here\n";
    } else if (request.method != "GET") {
      response.status = 405;
      response.body = "method not allowed: GET /metrics\n";
      response.headers.emplace_back("allow", "GET");
    } else {
      response.body = self->Scrape();
    }
    exchange->Reply(std::move(response));
  });
  if (!http.ok()) {
    return absl::Status(http.status().code(),
                        absl::StrCat("metrics: cannot listen on ", options.host, ":", options.port, ": ",
                                     http.status().message()));
  }
  server->http_ = *std::move(http);
  const bool tls = !options.tls_cert_file.empty();
  server->url_ = absl::StrCat(tls ? "https://" : "http://", options.host, ":", server->http_->port(), "/metrics");
  return server;
}

MetricsServer::~MetricsServer() {
  if (http_) http_->Shutdown();
}

void MetricsServer::Add(const std::shared_ptr<prometheus::Collectable>& collectable) {
  std::lock_guard<std::mutex> lock(mu_);
  extra_.push_back(collectable);
}

std::string MetricsServer::Scrape() const {
  std::vector<prometheus::MetricFamily> families = registry_->Collect();
  std::vector<std::shared_ptr<prometheus::Collectable>> extra;
  {
    std::lock_guard<std::mutex> lock(mu_);
    extra = extra_;
  }
  for (const auto& collectable : extra) {
    std::vector<prometheus::MetricFamily> more = collectable->Collect();
    families.insert(families.end(), std::make_move_iterator(more.begin()), std::make_move_iterator(more.end()));
  }
  return prometheus::TextSerializer().Serialize(families);
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
