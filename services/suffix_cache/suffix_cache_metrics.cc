#include "services/suffix_cache/suffix_cache_metrics.h"

#include <string>
#include <utility>

#include <prometheus/client_metric.h>
#include <prometheus/collectable.h>
#include <prometheus/metric_family.h>

#include "common/metrics/metric_family.h"

namespace floe::suffix_cache {

class SuffixCacheMetrics::StateCollector final : public prometheus::Collectable {
 public:
  StateCollector(const SuffixCacheStore* store, const SuffixCacheService* service)
      : store_(store), service_(service) {}

  std::vector<prometheus::MetricFamily> Collect() const override {
    using prometheus::MetricType;
    const StoreStats stats = store_->Stats();
    auto one = [](const char* name, const char* help, MetricType type, double value) {
      prometheus::MetricFamily f = MakeFamily(name, help, type);
      prometheus::ClientMetric m;
      if (type == MetricType::Counter) {
        m.counter.value = value;
      } else {
        m.gauge.value = value;
      }
      f.metric.push_back(std::move(m));
      return f;
    };
    return {
        one("floe_suffix_cache_cached_responses", "Responses in the global trees (active requests included).",
            MetricType::Gauge, static_cast<double>(stats.cached)),
        one("floe_suffix_cache_bytes", "Estimated bytes of the global trees and stored responses.",
            MetricType::Gauge, static_cast<double>(stats.bytes)),
        one("floe_suffix_cache_active_request_bytes",
            "Bytes of the active requests' local trees, context tails and queued appends (with "
            "floe_suffix_cache_bytes, what --max-bytes bounds).",
            MetricType::Gauge, static_cast<double>(stats.active_bytes)),
        one("floe_suffix_cache_max_bytes", "The memory budget, --max-bytes.", MetricType::Gauge,
            static_cast<double>(store_->options().max_bytes)),
        one("floe_suffix_cache_cached_tokens", "Tokens of the cached responses.", MetricType::Gauge,
            static_cast<double>(stats.cached_tokens)),
        one("floe_suffix_cache_nodes", "Nodes of the global suffix trees.", MetricType::Gauge,
            static_cast<double>(stats.nodes)),
        one("floe_suffix_cache_active_requests", "Requests between StartRequest and End/AbortRequest.",
            MetricType::Gauge, static_cast<double>(stats.active)),
        one("floe_suffix_cache_evictions_total", "Responses evicted (count or byte bound, aborts).",
            MetricType::Counter, static_cast<double>(stats.evictions_total)),
        one("floe_suffix_cache_steps_total", "Step calls served.", MetricType::Counter,
            static_cast<double>(service_->steps_total())),
        one("floe_suffix_cache_drafts_total", "Non-empty drafts answered.", MetricType::Counter,
            static_cast<double>(service_->drafts_total())),
        one("floe_suffix_cache_speculate_queries_total",
            "Step entries that asked for a draft (hit rate: drafts_total / this).", MetricType::Counter,
            static_cast<double>(service_->speculate_queries_total())),
        one("floe_suffix_cache_rejected_total", "Calls refused with RESOURCE_EXHAUSTED.", MetricType::Counter,
            static_cast<double>(service_->rejected_total())),
        one("floe_suffix_cache_rejected_starts_total",
            "StartRequest calls refused because active requests would exceed --max-bytes.", MetricType::Counter,
            static_cast<double>(stats.refused_starts_total)),
        one("floe_suffix_cache_expired_requests_total",
            "Active requests ended because no call named them for --request-lease-s.", MetricType::Counter,
            static_cast<double>(stats.expired_total)),
    };
  }

 private:
  const SuffixCacheStore* store_;
  const SuffixCacheService* service_;
};

SuffixCacheMetrics::SuffixCacheMetrics(MetricsServer& server, const SuffixCacheStore* store,
                                       SuffixCacheService* service)
    : collector_(std::make_shared<StateCollector>(store, service)) {
  latency_ = &prometheus::BuildHistogram()
                  .Name("floe_suffix_cache_rpc_latency_seconds")
                  .Help("Server-side latency of suffix-cache calls by method.")
                  .Register(server.registry());
  const std::vector<double> buckets = {50e-6, 100e-6, 200e-6, 300e-6, 500e-6, 1e-3, 2e-3,
                                       5e-3,  10e-3,  25e-3,  50e-3,  100e-3, 250e-3, 1.0};
  // Created up front: observing then never takes the family's lock.
  auto by_method = std::make_shared<std::vector<std::pair<std::string, prometheus::Histogram*>>>();
  for (const char* method :
       {"StartRequest", "Step", "EndRequest", "AbortRequest", "GetStats", "Snapshot", "ClearNamespace"}) {
    by_method->emplace_back(method, &latency_->Add({{"method", method}}, buckets));
  }
  service->SetRpcObserver([by_method](const char* method, double seconds) {
    for (auto& [name, histogram] : *by_method) {
      if (name == method) {
        histogram->Observe(seconds);
        return;
      }
    }
  });
  // Inside a Step, the store's two phases (see StepTimings).
  auto& phases = prometheus::BuildHistogram()
                     .Name("floe_suffix_cache_step_phase_seconds")
                     .Help("Time of one Step in the store: appends and local drafts (appends_local_drafts), "
                           "then global drafts (global_drafts).")
                     .Register(server.registry());
  prometheus::Histogram* local = &phases.Add({{"phase", "appends_local_drafts"}}, buckets);
  prometheus::Histogram* global = &phases.Add({{"phase", "global_drafts"}}, buckets);
  service->SetStepObserver([local, global](const StepTimings& t) {
    local->Observe(t.appends_local_drafts_seconds);
    global->Observe(t.global_drafts_seconds);
  });
  server.Add(collector_);
}

}  // namespace floe::suffix_cache
