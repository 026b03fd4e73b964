// The router's Prometheus metrics: requests by final gRPC code, in-flight,
// admission rejections, retries, router-side TTFT; and per-worker health,
// outstanding requests and ejections, read from the WorkerPool at scrape time.
#pragma once

#include <memory>
#include <string>

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/gauge.h>
#include <prometheus/histogram.h>

#include "common/metrics/metrics_server.h"
#include "services/router/admission_gate.h"
#include "services/router/worker_pool.h"

namespace floe {

class RouterMetrics {
 public:
  // `pool` and `gate` must outlive the metrics server's scrapes.
  RouterMetrics(MetricsServer& server, const WorkerPool* pool, const AdmissionGate* gate);

  void ObserveFinished(const std::string& code_name);
  void ObserveRetry() { retries_->Increment(); }
  void ObserveFirstToken(double ttft_s) { ttft_->Observe(ttft_s); }
  // `field` is one of a fixed list (never a client's text): bounded labels.
  void ObserveIgnoredField(const std::string& field);

 private:
  class PoolCollector;
  std::shared_ptr<PoolCollector> collector_;
  prometheus::Family<prometheus::Counter>* requests_;
  prometheus::Counter* retries_;
  prometheus::Histogram* ttft_;
  prometheus::Family<prometheus::Counter>* ignored_fields_;
};

}  // namespace floe
