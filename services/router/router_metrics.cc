#include "services/router/router_metrics.h"

#include <prometheus/client_metric.h>
#include <prometheus/collectable.h>
#include <prometheus/metric_family.h>

#include "common/metrics/metric_family.h"

namespace floe {

class RouterMetrics::PoolCollector final : public prometheus::Collectable {
 public:
  PoolCollector(const WorkerPool* pool, const AdmissionGate* gate) : pool_(pool), gate_(gate) {}

  std::vector<prometheus::MetricFamily> Collect() const override {
    using prometheus::MetricType;
    auto family = MakeFamily;
    auto healthy = family("floe_router_worker_healthy", "1 while the worker receives requests.", MetricType::Gauge);
    auto outstanding = family("floe_router_worker_outstanding", "Router requests on the worker.", MetricType::Gauge);
    auto ejections = family("floe_router_worker_ejections_total", "Times the worker was ejected.", MetricType::Counter);
    auto panic = family("floe_router_worker_panic_picks_total",
                        "Attempts sent to the worker while ejected, because no untried worker was healthy.",
                        MetricType::Counter);
    for (const auto& w : pool_->workers()) {
      prometheus::ClientMetric m;
      m.label = {{"worker", w->address}};
      m.gauge.value = w->healthy.load() ? 1 : 0;
      healthy.metric.push_back(m);
      m.gauge.value = w->outstanding.load();
      outstanding.metric.push_back(m);
      prometheus::ClientMetric c;
      c.label = {{"worker", w->address}};
      c.counter.value = static_cast<double>(w->ejections.load());
      ejections.metric.push_back(c);
      c.counter.value = static_cast<double>(w->panic_picks.load());
      panic.metric.push_back(c);
    }
    auto in_flight = family("floe_router_requests_in_flight", "Requests being relayed.", MetricType::Gauge);
    prometheus::ClientMetric g;
    g.gauge.value = gate_->in_flight();
    in_flight.metric.push_back(g);
    auto rejected = family("floe_router_admission_rejections_total", "Requests refused by the admission gate.",
                           MetricType::Counter);
    prometheus::ClientMetric r;
    r.counter.value = static_cast<double>(gate_->rejected());
    rejected.metric.push_back(r);
    return {healthy, outstanding, ejections, panic, in_flight, rejected};
  }

 private:
  const WorkerPool* pool_;
  const AdmissionGate* gate_;
};

RouterMetrics::RouterMetrics(MetricsServer& server, const WorkerPool* pool, const AdmissionGate* gate)
    : collector_(std::make_shared<PoolCollector>(pool, gate)) {
  prometheus::Registry& registry = server.registry();
  requests_ = &prometheus::BuildCounter()
                   .Name("floe_router_requests_total")
                   .Help("Generate requests by final gRPC status code.")
                   .Register(registry);
  requests_->Add({{"code", "OK"}});
  retries_ = &prometheus::BuildCounter()
                  .Name("floe_router_retries_total")
                  .Help("Requests retried on another worker after one failed.")
                  .Register(registry)
                  .Add({});
  ttft_ = &prometheus::BuildHistogram()
               .Name("floe_router_time_to_first_token_seconds")
               .Help("Time to first token as the router sees it.")
               .Register(registry)
               .Add({}, TtftBuckets());
  ignored_fields_ = &prometheus::BuildCounter()
                        .Name("floe_http_ignored_fields_total")
                        .Help("OpenAI or vLLM request fields accepted and ignored by the HTTP API, by field (a fixed "
                              "list: openai_request.h's FindIgnoredField).")
                        .Register(registry);
  server.Add(collector_);
}

void RouterMetrics::ObserveIgnoredField(const std::string& field) {
  ignored_fields_->Add({{"field", field}}).Increment();
}

void RouterMetrics::ObserveFinished(const std::string& code_name) { requests_->Add({{"code", code_name}}).Increment(); }

}  // namespace floe
