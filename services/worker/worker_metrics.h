// The worker's Prometheus metrics, named, labelled (model_name) and bucketed
// exactly as vLLM's after the floe_ prefix, so a vLLM dashboard or an
// inference-gateway scraper ports by changing the prefix (mapping table:
// deploy/README.md). Engine gauges and counters are read at scrape time;
// request histograms are observed by the service from the engine's
// timestamps (RequestOutput::time), one clock per request.
//
// Thread-safe: observers are called from gRPC threads, Collect from the
// metrics server's I/O thread.
#pragma once

#include <atomic>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <prometheus/counter.h>
#include <prometheus/family.h>
#include <prometheus/histogram.h>

#include "common/metrics/metrics_server.h"
#include "services/worker/backend/rank_group.h"
#include "services/worker/engine/engine.h"
#include "services/worker/speculation/remote_suffix_stats.h"

namespace floe {

class WorkerMetrics {
 public:
  WorkerMetrics(MetricsServer& server, const std::string& model, int max_model_len);

  // Engine gauges and counters appear once an engine is attached.
  void AttachEngine(const Engine* engine);
  // The worker's ranks (floe_parallel_ranks) and what its rank group counts
  // per step (floe_parallel_mode, _mode_steps_total, _mode_tokens_total,
  // _mode_switches_total, _collective_seconds); null with one rank (TP, no
  // collectives). Call before serving.
  void SetParallelLayout(int ranks, std::shared_ptr<const ParallelStats> stats);
  // The suffix-cache client's view (floe_suffix_cache_client_*), when the
  // worker uses one. Call before serving.
  void AttachSuffixCacheStats(std::shared_ptr<const RemoteSuffixStats> stats);
  // floe_cache_config_info's cache_dtype label ("f32" or "bf16"; a static
  // string). Before serving.
  void SetKvCacheDtype(const char* dtype);

  // The start-up as the log told it: floe_startup_phase_seconds{phase} for
  // each phase and phase="total" (process start to ready), and
  // floe_weight_cache{outcome} = 1 (off, hit, written or failed). Once,
  // before serving.
  void SetStartup(const std::vector<std::pair<std::string, int64_t>>& phases_ms, int64_t total_ms,
                  const std::string& weight_cache_outcome);

  void ObserveFirstToken(double ttft_s);
  // `tokens` arrived together `gap_s` after the previous ones: counted as that
  // many inter-token gaps of equal share, as vLLM counts per token.
  void ObserveTokens(double gap_s, int tokens);
  // e2e = final_output.time - final_output.arrival = queue + prefill + decode.
  void ObserveFinished(const RequestOutput& final_output);

  // Structured outputs: a request's grammar came from the cache, or was
  // compiled in `compile_s` (floe_structured_output_cache_{hits,misses}_total,
  // _compile_seconds); or its compile failed (_compile_errors_total).
  void ObserveGrammarCompile(bool cache_hit, double compile_s);
  void ObserveGrammarCompileError();

 private:
  class EngineCollector;
  std::shared_ptr<EngineCollector> collector_;
  prometheus::Histogram* ttft_;
  prometheus::Histogram* itl_;
  prometheus::Histogram* tpot_;
  prometheus::Histogram* e2e_;
  prometheus::Histogram* queue_;
  prometheus::Histogram* prefill_;
  prometheus::Histogram* decode_;
  prometheus::Histogram* inference_;
  prometheus::Histogram* prompt_tokens_;
  prometheus::Histogram* generation_tokens_;
  prometheus::Family<prometheus::Counter>* finished_;
  prometheus::Histogram* grammar_compile_;
  prometheus::Counter* grammar_hits_;
  prometheus::Counter* grammar_misses_;
  prometheus::Counter* grammar_errors_;
  prometheus::Registry& registry_;
  std::string model_;
};

}  // namespace floe
