// Prometheus metrics of floe-suffix-cache: call latency by method
// (floe_suffix_cache_rpc_latency_seconds), a Step's two phases in the store
// (floe_suffix_cache_step_phase_seconds{phase}), and, read at scrape time,
// cached responses, bytes (global trees; active requests' bytes; the
// budget), nodes, active requests, cached tokens, evictions, expired
// requests, steps, speculate queries and drafts (their ratio: the hit rate)
// and rejections (overload; starts over --max-bytes).
#pragma once

#include <memory>

#include <prometheus/family.h>
#include <prometheus/histogram.h>

#include "common/metrics/metrics_server.h"
#include "services/suffix_cache/suffix_cache_service.h"

namespace floe::suffix_cache {

class SuffixCacheMetrics {
 public:
  // `store` and `service` must outlive the metrics server's scrapes.
  // Installs itself as the service's RPC observer (call before serving).
  SuffixCacheMetrics(MetricsServer& server, const SuffixCacheStore* store, SuffixCacheService* service);

 private:
  class StateCollector;
  std::shared_ptr<StateCollector> collector_;
  prometheus::Family<prometheus::Histogram>* latency_;
};

}  // namespace floe::suffix_cache
