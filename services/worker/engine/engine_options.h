#pragma once

#include <cstdint>
#include <utility>
#include <vector>

namespace floe {

struct EngineOptions {
  int block_size = 16;
  // KV pool size; 0 derives it from kv_cache_bytes.
  int num_blocks = 0;
  int64_t kv_cache_bytes = int64_t{1} << 30;
  // Token budget of one step: decodes first, then prefill chunks fill the rest.
  int max_num_batched_tokens = 512;
  int max_num_seqs = 64;
  // Bound of the waiting queue; beyond it Submit answers RESOURCE_EXHAUSTED.
  int max_waiting = 256;
  // 0: the model's max_position_embeddings.
  int max_model_len = 0;
  bool enable_prefix_caching = true;
  // EOS ids of the served model (from its tokenizer/generation config).
  std::vector<int32_t> eos_token_ids;

  // Speculative decoding (active only when proposers are installed).
  // Draft tokens verified per sequence per step (k); 0 turns speculation off.
  int num_speculative_tokens = 0;
  // Load-aware draft budget (draft_budget.h): a step verifies at most
  //   max(0, speculative_token_threshold - T)
  // draft tokens in total, T being the tokens the step would run without
  // drafts (decodes + pending prefill, capped at max_num_batched_tokens), and
  // within that the draft tokens that maximize expected emitted tokens per
  // unit of step time, from each request's measured acceptance and the step
  // cost curve: speculative_step_cost_curve (tokens run, ms) where set
  // (measured by the worker at start, or loaded from a file), else the line
  // speculative_step_overhead_tokens + N.
  int speculative_token_threshold = 512;
  // < 0: threshold only (no cost model).
  double speculative_step_overhead_tokens = 1.0;
  std::vector<std::pair<int, double>> speculative_step_cost_curve;
  // EngineCore::Create measures speculative_step_cost_curve on the backend
  // (a few forward passes) when it is empty and speculation is on.
  bool measure_step_cost = false;
  // The given curve times the forward alone (a roofline): as for a measured
  // one, what each step spends outside the forward is added to it.
  bool step_cost_curve_forward_only = false;
  // Where several proposers draft for one sequence (suffix+lstm), which
  // draft it verifies (draft_selector.h): measured acceptance per request
  // and proposer, or each proposer's own score.
  enum class DraftSelection { kAcceptance, kScore };
  DraftSelection draft_selection = DraftSelection::kAcceptance;
  // Structured outputs: a constrained sequence's drafts are cut where its
  // grammar forbids them and extended by the tokens it forces
  // (grammar_drafts.h). False verifies proposers' drafts as they come,
  // which is as lossless, only slower: the benchmarks' baseline.
  bool grammar_drafts = true;
};

}  // namespace floe
