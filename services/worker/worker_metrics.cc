#include "services/worker/worker_metrics.h"

#include <prometheus/gauge.h>

#include <prometheus/client_metric.h>
#include <prometheus/collectable.h>
#include <prometheus/metric_family.h>

#include <chrono>
#include <limits>

#include "common/metrics/metric_family.h"

namespace floe {
namespace {

prometheus::MetricFamily Family(const std::string& name, const std::string& help, prometheus::MetricType type,
                                const std::string& model, double value) {
  prometheus::MetricFamily family = MakeFamily(name, help, type);
  prometheus::ClientMetric metric;
  metric.label = {{"model_name", model}};
  if (type == prometheus::MetricType::Counter) {
    metric.counter.value = value;
  } else {
    metric.gauge.value = value;
  }
  family.metric.push_back(std::move(metric));
  return family;
}

const char* FinishReasonLabel(FinishReason reason) {
  switch (reason) {
    case FinishReason::kLength: return "length";
    case FinishReason::kStop: return "stop";
    case FinishReason::kAbort: return "abort";
    case FinishReason::kContext: return "context";
    case FinishReason::kNone: break;
  }
  return "none";
}

}  // namespace

class WorkerMetrics::EngineCollector final : public prometheus::Collectable {
 public:
  // Per proposer: drafts, draft tokens, accepted tokens, and accepted per
  // draft position (label `position`, bounded by num_speculative_tokens).
  void AppendSpeculation(const EngineCounters& c, std::vector<prometheus::MetricFamily>& out) const {
    if (c.speculation.empty()) return;
    auto family = [](const char* name, const char* help) {
      return MakeFamily(name, help, prometheus::MetricType::Counter);
    };
    auto drafts = family("floe_spec_decode_num_drafts_total", "Drafts verified.");
    auto draft_tokens = family("floe_spec_decode_num_draft_tokens_total", "Draft tokens verified.");
    auto accepted = family("floe_spec_decode_num_accepted_tokens_total", "Draft tokens accepted.");
    auto per_position = family("floe_spec_decode_num_accepted_tokens_per_pos_total", "Drafts whose token at this position was accepted.");
    auto add = [&](prometheus::MetricFamily& f, prometheus::Labels labels, double value) {
      prometheus::ClientMetric m;
      m.label = {};
      for (auto& [k, v] : labels) m.label.push_back({k, v});
      m.counter.value = value;
      f.metric.push_back(std::move(m));
    };
    for (const SpeculationCounters& s : c.speculation) {
      const prometheus::Labels labels = {{"model_name", model_}, {"proposer", s.proposer}};
      add(drafts, labels, static_cast<double>(s.drafts));
      add(draft_tokens, labels, static_cast<double>(s.draft_tokens));
      add(accepted, labels, static_cast<double>(s.accepted_tokens));
      for (size_t i = 0; i < s.accepted_per_position.size(); ++i) {
        prometheus::Labels at = labels;
        at["position"] = std::to_string(i);
        add(per_position, at, static_cast<double>(s.accepted_per_position[i]));
      }
    }
    for (auto* f : {&drafts, &draft_tokens, &accepted, &per_position}) out.push_back(std::move(*f));
    out.push_back(AcceptedLength(c));
  }

  // Accepted tokens per verified draft (sequence x step), per proposer:
  // drafts accept a prefix, so those accepting at most n tokens are the
  // drafts minus those whose token n was accepted.
  prometheus::MetricFamily AcceptedLength(const EngineCounters& c) const {
    prometheus::MetricFamily f = MakeFamily("floe_spec_decode_accepted_length",
                                            "Draft tokens accepted per verified draft.",
                                            prometheus::MetricType::Histogram);
    for (const SpeculationCounters& s : c.speculation) {
      prometheus::ClientMetric m;
      m.label = {{"model_name", model_}, {"proposer", s.proposer}};
      for (size_t n = 0; n < s.accepted_per_position.size(); ++n) {
        m.histogram.bucket.push_back(
            {static_cast<uint64_t>(s.drafts - s.accepted_per_position[n]), static_cast<double>(n)});
      }
      m.histogram.bucket.push_back({static_cast<uint64_t>(s.drafts), std::numeric_limits<double>::infinity()});
      m.histogram.sample_count = static_cast<uint64_t>(s.drafts);
      m.histogram.sample_sum = static_cast<double>(s.accepted_tokens);
      f.metric.push_back(std::move(m));
    }
    return f;
  }

  // Structured outputs in the engine: the time per token mask (one mask
  // in StructuredOutputCounters::kMaskSampleEvery timed), forced tokens
  // drafted and accepted, proposers' draft tokens the grammar cut, and
  // requests ended because the mask left nothing.
  void AppendStructuredOutput(const StructuredOutputCounters& c, std::vector<prometheus::MetricFamily>& out) const {
    using prometheus::MetricType;
    prometheus::MetricFamily mask = MakeFamily(
        "floe_structured_output_mask_seconds",
        "Time to compute a structured output's token mask (a sample: every 16th mask is timed).",
        MetricType::Histogram);
    prometheus::ClientMetric h;
    h.label = {{"model_name", model_}};
    uint64_t cumulative = 0;
    for (size_t b = 0; b < c.mask_seconds_buckets.size(); ++b) {
      cumulative += static_cast<uint64_t>(c.mask_seconds_buckets[b]);
      h.histogram.bucket.push_back({cumulative, b < StructuredOutputCounters::kMaskBuckets.size()
                                                    ? StructuredOutputCounters::kMaskBuckets[b]
                                                    : std::numeric_limits<double>::infinity()});
    }
    h.histogram.sample_count = cumulative;
    h.histogram.sample_sum = c.mask_seconds_sum;
    mask.metric.push_back(std::move(h));
    out.push_back(std::move(mask));
    const std::pair<const char*, std::pair<const char*, int64_t>> counters[] = {
        {"floe_structured_output_masks_total", {"Token masks computed for structured outputs.", c.masks}},
        {"floe_structured_output_forced_draft_tokens_total",
         {"Tokens the grammar forced, verified as free drafts.", c.forced_draft_tokens}},
        {"floe_structured_output_forced_draft_accepted_tokens_total",
         {"Forced draft tokens accepted.", c.forced_draft_accepted}},
        {"floe_structured_output_draft_tokens_cut_total",
         {"Proposers' draft tokens the grammar forbade (cut before verification).", c.draft_tokens_cut}},
        {"floe_structured_output_dead_ends_total",
         {"Requests ended (reason stop) because the mask left no token (ignore_eos or min_tokens against a "
          "complete output).",
          c.dead_ends}},
    };
    for (const auto& [name, help_value] : counters)
      out.push_back(Family(name, help_value.first, MetricType::Counter, model_,
                           static_cast<double>(help_value.second)));
  }

  void AppendSuffixCache(std::vector<prometheus::MetricFamily>& out) const {
    const std::shared_ptr<const RemoteSuffixStats> stats = suffix_cache_.load();
    if (!stats) return;
    using prometheus::MetricType;
    const RemoteSuffixStats::Snapshot s = stats->Read();
    auto family = MakeFamily;
    auto latency = family("floe_suffix_cache_client_rpc_latency_seconds",
                          "Worker-side latency of suffix-cache calls (step: one batched Step per engine step).",
                          MetricType::Histogram);
    auto failures = family("floe_suffix_cache_client_rpc_failures_total",
                           "Suffix-cache calls that failed, by reason (timeout: past the deadline).",
                           MetricType::Counter);
    auto skipped = family("floe_suffix_cache_client_skipped_calls_total",
                          "Suffix-cache calls not sent because the replica is down (backoff).", MetricType::Counter);
    for (int call = 0; call < RemoteSuffixStats::kNumCalls; ++call) {
      const auto c = static_cast<RemoteSuffixStats::Call>(call);
      const prometheus::ClientMetric::Label model{"model_name", model_}, call_label{"call", RemoteSuffixStats::CallName(c)};
      prometheus::ClientMetric h;
      h.label = {model, call_label};
      const RemoteSuffixStats::Latency& l = s.latency[call];
      uint64_t cumulative = 0;
      for (size_t b = 0; b < l.buckets.size(); ++b) {
        cumulative += static_cast<uint64_t>(l.buckets[b]);
        h.histogram.bucket.push_back({cumulative, b < RemoteSuffixStats::kLatencyBounds.size()
                                                      ? RemoteSuffixStats::kLatencyBounds[b]
                                                      : std::numeric_limits<double>::infinity()});
      }
      h.histogram.sample_count = static_cast<uint64_t>(l.count);
      h.histogram.sample_sum = l.sum_s;
      latency.metric.push_back(std::move(h));
      for (int reason = 0; reason < RemoteSuffixStats::kNumFailures; ++reason) {
        prometheus::ClientMetric m;
        m.label = {model, call_label,
                   {"reason", RemoteSuffixStats::FailureName(static_cast<RemoteSuffixStats::Failure>(reason))}};
        m.counter.value = static_cast<double>(s.failures[call][reason]);
        failures.metric.push_back(std::move(m));
      }
      prometheus::ClientMetric m;
      m.label = {model, call_label};
      m.counter.value = static_cast<double>(s.skipped[call]);
      skipped.metric.push_back(std::move(m));
    }
    auto up = family("floe_suffix_cache_client_up", "1 while the suffix-cache replica answers, 0 while it is down.",
                     MetricType::Gauge);
    auto went_down = family("floe_suffix_cache_client_unreachable_total",
                            "Times the replica was marked down (calls failing in a row).", MetricType::Counter);
    auto probes = family("floe_suffix_cache_client_reconnect_attempts_total",
                         "Probe calls sent to a down replica after its backoff.", MetricType::Counter);
    for (const RemoteSuffixStats::Replica& r : s.replicas) {
      prometheus::ClientMetric m;
      m.label = {{"model_name", model_}, {"replica", r.address}};
      m.gauge.value = r.up ? 1 : 0;
      up.metric.push_back(m);
      m.gauge = {};
      m.counter.value = static_cast<double>(r.went_down);
      went_down.metric.push_back(m);
      m.counter.value = static_cast<double>(r.probes);
      probes.metric.push_back(m);
    }
    auto dropped = family("floe_suffix_cache_client_dropped_lifecycle_total",
                          "Start/End calls dropped because the lifecycle queue was full.", MetricType::Counter);
    prometheus::ClientMetric d;
    d.label = {{"model_name", model_}};
    d.counter.value = static_cast<double>(s.dropped_lifecycle);
    dropped.metric.push_back(std::move(d));
    for (auto* f : {&latency, &failures, &skipped, &up, &went_down, &probes, &dropped}) out.push_back(std::move(*f));
  }

  // Shift Parallelism: the mode of the last step, the switches, and per
  // mode the steps and tokens run; the per-step collective time. One rank
  // reports TP and nothing run in it.
  void AppendParallel(std::vector<prometheus::MetricFamily>& out) const {
    using prometheus::MetricType;
    const std::shared_ptr<const ParallelStats> p = parallel_.load();
    const int mode_now = p ? p->mode.load() : static_cast<int>(ParallelMode::kTensor);
    prometheus::MetricFamily mode = MakeFamily(
        "floe_parallel_mode", "1 for the parallel mode of the worker's last step (label mode: tp|sp).", MetricType::Gauge);
    prometheus::MetricFamily steps = MakeFamily("floe_parallel_mode_steps_total", "Forward steps run in each mode.",
                                                MetricType::Counter);
    prometheus::MetricFamily tokens = MakeFamily("floe_parallel_mode_tokens_total",
                                                 "Scheduled tokens run in each mode.", MetricType::Counter);
    for (ParallelMode m : {ParallelMode::kTensor, ParallelMode::kSequence}) {
      const int i = static_cast<int>(m);
      prometheus::ClientMetric metric;
      metric.label = {{"model_name", model_}, {"mode", ParallelModeName(m)}};
      metric.gauge.value = i == mode_now ? 1 : 0;
      mode.metric.push_back(metric);
      metric.gauge = {};
      metric.counter.value = p ? static_cast<double>(p->steps[i].load()) : 0;
      steps.metric.push_back(metric);
      metric.counter.value = p ? static_cast<double>(p->tokens[i].load()) : 0;
      tokens.metric.push_back(metric);
    }
    out.push_back(std::move(mode));
    out.push_back(std::move(steps));
    out.push_back(std::move(tokens));
    out.push_back(Family("floe_parallel_ranks", "Ranks (processes) the worker's model runs over.", MetricType::Gauge,
                         model_, ranks_.load()));
    out.push_back(Family("floe_parallel_mode_switches_total", "Shifts between TP and SP x TP.", MetricType::Counter,
                         model_, p ? static_cast<double>(p->switches.load()) : 0));
    prometheus::MetricFamily collective =
        MakeFamily("floe_parallel_collective_seconds", "Rank 0's time in the model's collectives, per step.",
                   MetricType::Histogram);
    prometheus::ClientMetric h;
    h.label = {{"model_name", model_}};
    uint64_t cumulative = 0;
    for (int b = 0; b <= ParallelStats::kNumBuckets; ++b) {
      cumulative += p ? static_cast<uint64_t>(p->step_collective_buckets[b].load()) : 0;
      prometheus::ClientMetric::Bucket bucket;
      bucket.cumulative_count = cumulative;
      bucket.upper_bound =
          b < ParallelStats::kNumBuckets ? ParallelStats::kBuckets[b] : std::numeric_limits<double>::infinity();
      h.histogram.bucket.push_back(bucket);
    }
    h.histogram.sample_count = cumulative;
    h.histogram.sample_sum = p ? p->step_collective_ns_sum.load() * 1e-9 : 0;
    collective.metric.push_back(std::move(h));
    out.push_back(std::move(collective));
  }

  void AttachSuffixCache(std::shared_ptr<const RemoteSuffixStats> stats) { suffix_cache_.store(std::move(stats)); }

  explicit EngineCollector(std::string model) : model_(std::move(model)) {}
  void SetParallelLayout(int ranks, std::shared_ptr<const ParallelStats> stats) {
    ranks_.store(ranks);
    parallel_.store(std::move(stats));
  }
  void Attach(const Engine* engine) { engine_.store(engine); }
  void SetCacheDtype(const char* dtype) { cache_dtype_.store(dtype); }

  std::vector<prometheus::MetricFamily> Collect() const override {
    const Engine* engine = engine_.load();
    if (!engine) return {};
    using prometheus::MetricType;
    const EngineLoad load = engine->Load();
    const EngineCounters c = engine->Counters();
    std::vector<prometheus::MetricFamily> families = {
        Family("floe_num_requests_running", "Requests in the running batch.", MetricType::Gauge, model_, load.running),
        Family("floe_num_requests_waiting", "Requests waiting to be scheduled.", MetricType::Gauge, model_, load.waiting),
        Family("floe_kv_cache_usage_perc", "KV-cache usage (0-1, as vLLM's).", MetricType::Gauge, model_,
               load.kv_usage),
        Family("floe_prompt_tokens_total", "Prompt tokens computed (prefill).", MetricType::Counter, model_,
               static_cast<double>(c.prompt_tokens_computed)),
        Family("floe_generation_tokens_total", "Tokens generated.", MetricType::Counter, model_,
               static_cast<double>(c.generated_tokens)),
        Family("floe_prefix_cache_queries_total", "Prompt tokens looked up in the prefix cache.", MetricType::Counter,
               model_, static_cast<double>(c.prefix_query_tokens)),
        Family("floe_prefix_cache_hits_total", "Prompt tokens found in the prefix cache.", MetricType::Counter, model_,
               static_cast<double>(c.prefix_hit_tokens)),
        Family("floe_num_preemptions_total", "Sequences preempted (recomputed later).", MetricType::Counter, model_,
               static_cast<double>(c.preemptions)),
        Family("floe_swiftkv_skipped_tokens_total",
               "Tokens that ran only the first num_key_value_layers of a SwiftKV model (0 for other models).",
               MetricType::Counter, model_, static_cast<double>(c.swiftkv_skipped_tokens)),
        Family("floe_engine_steps_total", "Engine steps (forward passes).", MetricType::Counter, model_,
               static_cast<double>(c.steps)),
    };
    // vLLM's info gauge: the cache's configuration as labels, value 1.
    prometheus::MetricFamily info = MakeFamily("floe_cache_config_info", "Information of the KV cache's configuration.",
                                               MetricType::Gauge);
    prometheus::ClientMetric config;
    config.label = {{"model_name", model_},
                    {"block_size", std::to_string(load.block_size)},
                    {"num_gpu_blocks", std::to_string(load.total_blocks)},
                    {"cache_dtype", cache_dtype_.load()},
                    {"num_tokens", std::to_string(static_cast<int64_t>(load.total_blocks) * load.block_size)}};
    config.gauge.value = 1;
    info.metric.push_back(std::move(config));
    families.push_back(std::move(info));
    AppendSpeculation(c, families);
    AppendStructuredOutput(c.structured_output, families);
    AppendSuffixCache(families);
    AppendParallel(families);
    return families;
  }

 private:
  std::string model_;
  std::atomic<const Engine*> engine_{nullptr};
  std::atomic<int> ranks_{1};
  std::atomic<const char*> cache_dtype_{"f32"};  // a static string
  std::atomic<std::shared_ptr<const ParallelStats>> parallel_;
  // Set once at start-up, but the metrics server may already be scraping.
  std::atomic<std::shared_ptr<const RemoteSuffixStats>> suffix_cache_;
};

WorkerMetrics::WorkerMetrics(MetricsServer& server, const std::string& model, int max_model_len)
    : collector_(std::make_shared<EngineCollector>(model)), registry_(server.registry()), model_(model) {
  prometheus::Registry& registry = server.registry();
  const prometheus::Labels labels = {{"model_name", model}};
  auto histogram = [&](const std::string& name, const std::string& help, const std::vector<double>& buckets) {
    return &prometheus::BuildHistogram().Name(name).Help(help).Register(registry).Add(labels, buckets);
  };
  ttft_ = histogram("floe_time_to_first_token_seconds", "Time to first token.", TtftBuckets());
  itl_ = histogram("floe_inter_token_latency_seconds", "Gap between consecutive output tokens.", InterTokenBuckets());
  tpot_ = histogram("floe_request_time_per_output_token_seconds", "(E2E - TTFT) / (output tokens - 1) per request.",
                    InterTokenBuckets());
  e2e_ = histogram("floe_e2e_request_latency_seconds", "Request latency, arrival to last token.",
                   RequestLatencyBuckets());
  queue_ = histogram("floe_request_queue_time_seconds", "Time waiting before first scheduled.", RequestLatencyBuckets());
  prefill_ = histogram("floe_request_prefill_time_seconds", "First scheduled to first token.", RequestLatencyBuckets());
  decode_ = histogram("floe_request_decode_time_seconds", "First token to last token.", RequestLatencyBuckets());
  const std::vector<double> token_buckets = OneTwoFiveBuckets(max_model_len);
  prompt_tokens_ = histogram("floe_request_prompt_tokens", "Prompt tokens per request.", token_buckets);
  generation_tokens_ = histogram("floe_request_generation_tokens", "Generated tokens per request.", token_buckets);
  inference_ = histogram("floe_request_inference_time_seconds", "First scheduled to last token.",
                         RequestLatencyBuckets());
  finished_ = &prometheus::BuildCounter()
                   .Name("floe_request_success_total")
                   .Help("Finished requests by finish reason.")
                   .Register(registry);
  for (const char* reason : {"length", "stop", "abort", "context"})
    finished_->Add({{"model_name", model}, {"finished_reason", reason}});
  // A tool schema compiles in milliseconds, a large API schema's masks in
  // seconds; the compile time limit defaults to 5 s.
  grammar_compile_ = histogram("floe_structured_output_compile_seconds",
                               "Time to compile a structured output's grammar and its token masks (cache misses).",
                               {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10});
  auto counter = [&](const std::string& name, const std::string& help) {
    return &prometheus::BuildCounter().Name(name).Help(help).Register(registry).Add(labels);
  };
  grammar_hits_ = counter("floe_structured_output_cache_hits_total",
                          "Structured-output requests whose grammar was cached (or being compiled for another).");
  grammar_misses_ = counter("floe_structured_output_cache_misses_total",
                            "Structured-output requests whose grammar this worker compiled.");
  grammar_errors_ = counter("floe_structured_output_compile_errors_total",
                            "Structured-output requests refused: the constraint did not compile, or not in time.");
  server.Add(collector_);
}

void WorkerMetrics::AttachEngine(const Engine* engine) { collector_->Attach(engine); }

void WorkerMetrics::SetStartup(const std::vector<std::pair<std::string, int64_t>>& phases_ms, int64_t total_ms,
                               const std::string& weight_cache_outcome) {
  auto& phases = prometheus::BuildGauge()
                     .Name("floe_startup_phase_seconds")
                     .Help("Start-up phases of this worker (phase=\"total\": process start to ready).")
                     .Register(registry_);
  for (const auto& [phase, ms] : phases_ms) phases.Add({{"model_name", model_}, {"phase", phase}}).Set(ms / 1000.0);
  phases.Add({{"model_name", model_}, {"phase", "total"}}).Set(total_ms / 1000.0);
  prometheus::BuildGauge()
      .Name("floe_weight_cache")
      .Help("What the weight cache did at start-up (1 on the outcome: off, hit, written, failed).")
      .Register(registry_)
      .Add({{"model_name", model_}, {"outcome", weight_cache_outcome}})
      .Set(1);
}

void WorkerMetrics::SetParallelLayout(int ranks, std::shared_ptr<const ParallelStats> stats) {
  collector_->SetParallelLayout(ranks, std::move(stats));
}

void WorkerMetrics::SetKvCacheDtype(const char* dtype) { collector_->SetCacheDtype(dtype); }

void WorkerMetrics::AttachSuffixCacheStats(std::shared_ptr<const RemoteSuffixStats> stats) {
  collector_->AttachSuffixCache(std::move(stats));
}

void WorkerMetrics::ObserveFirstToken(double ttft_s) { ttft_->Observe(ttft_s); }

void WorkerMetrics::ObserveTokens(double gap_s, int tokens) {
  if (tokens <= 0) return;
  const double share = gap_s / tokens;
  for (int i = 0; i < tokens; ++i) itl_->Observe(share);
}

void WorkerMetrics::ObserveGrammarCompile(bool cache_hit, double compile_s) {
  if (cache_hit) {
    grammar_hits_->Increment();
  } else {
    grammar_misses_->Increment();
    grammar_compile_->Observe(compile_s);
  }
}

void WorkerMetrics::ObserveGrammarCompileError() { grammar_errors_->Increment(); }

void WorkerMetrics::ObserveFinished(const RequestOutput& out) {
  finished_->Add({{"model_name", model_}, {"finished_reason", FinishReasonLabel(out.finish_reason)}}).Increment();
  e2e_->Observe(std::chrono::duration<double>(out.time - out.arrival).count());
  queue_->Observe(out.queue_time_s);
  prefill_->Observe(out.prefill_time_s);
  decode_->Observe(out.decode_time_s);
  inference_->Observe(out.prefill_time_s + out.decode_time_s);
  prompt_tokens_->Observe(out.prompt_tokens);
  generation_tokens_->Observe(out.completion_tokens);
  if (out.completion_tokens > 1) tpot_->Observe(out.decode_time_s / (out.completion_tokens - 1));
}

}  // namespace floe
