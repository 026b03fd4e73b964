#include "services/worker/worker_flags.h"

#include "common/cli/arg_parser.h"

namespace floe {

void AddWorkerFlags(ArgParser& parser, WorkerFlags* flags) {
  WorkerFlags& f = *flags;
  parser.AddString("model", &f.model, "checkpoint folder (config.json + safetensors)");
  parser.AddString("model-name", &f.model_name, "name clients use (default: the folder's name)");
  parser.AddString("load-format", &f.load_format, "auto|safetensors|dummy (dummy: seeded random weights from config.json)");
  parser.AddString("dummy-dtype", &f.dummy_dtype, "weight dtype of --load-format dummy: bf16|f32");
  parser.AddString("weight-cache", &f.weight_cache,
                   "folder for repacked weights, mapped instead of repacked on the next start: "
                   "auto (MODEL/.floe-cache) | off | DIR");
  parser.AddDouble("weight-cache-max-gb", &f.weight_cache_max_gb,
                    "bound of the weight cache folder: writing a file first deletes the least recently used "
                    "ones (not those used in the last 10 minutes) until all fit");
  parser.AddInt("threads", &f.threads, "compute threads (0: all cores)");
  parser.AddInt("block-size", &f.block_size, "KV cache block size in tokens");
  parser.AddDouble("kv-cache-gb", &f.kv_cache_gb,
                   "KV cache memory budget per rank in GiB (--device cpu; 0: auto, room for 32768 tokens of the "
                   "model, at most --kv-cache-auto-fraction of the memory available, logged as kv_cache_budget)");
  parser.AddDouble("kv-cache-auto-fraction", &f.kv_cache_auto_fraction,
                   "with --kv-cache-gb 0: the share of the host's available memory this worker's ranks may take "
                   "together (floe local gives each of N workers 0.4 / N)");
  parser.AddString("kv-cache-dtype", &f.kv_cache_dtype,
                   "auto|f32|bf16|fp8_e4m3: the KV cache's element type (vLLM's flag); auto keeps the model's dtype "
                   "on the CPU (bf16 for a bf16 or f16 checkpoint, else f32) and is f32 on CUDA until a GPU check "
                   "ran the narrow CUDA cache (docs/gpu.md); bf16 holds twice the tokens per GiB "
                   "of f32, fp8_e4m3 (alias fp8) four times, with the checkpoint's k_scale/v_scale (a "
                   "compressed-tensors kv_cache_scheme) or else 1.0");
  parser.AddString("device", &f.device,
                   "auto|cpu|cuda: where the model runs (auto: cuda where this build has it and this machine has "
                   "a GPU per rank, rank r on GPU r; the 'device' log line says which and why)");
  parser.AddDouble("gpu-memory-utilization", &f.gpu_memory_utilization,
                   "--device cuda: the share of the GPU's memory this worker may use (weights, activations and the "
                   "KV cache, which gets the rest), as vLLM's");
  parser.AddBool("enforce-eager", &f.enforce_eager,
                 "--device cuda: run every step eagerly (no CUDA graphs for decode steps), as vLLM's");
  parser.AddInt("max-num-batched-tokens", &f.max_num_batched_tokens, "token budget of one engine step");
  parser.AddInt("max-num-seqs", &f.max_num_seqs, "most sequences in one batch");
  parser.AddInt("max-waiting", &f.max_waiting, "bound of the waiting queue (beyond: RESOURCE_EXHAUSTED)");
  parser.AddInt("max-model-len", &f.max_model_len, "context limit (0: the model's)");
  parser.AddInt("max-tokens-limit", &f.max_tokens_limit, "largest max_tokens a request may ask for");
  parser.AddBool("no-prefix-caching", &f.no_prefix_caching, "disable automatic prefix caching");
  parser.AddString("speculative", &f.speculative,
                   "speculative decoding (lossless): off|ngram|suffix|lstm|suffix+lstm (default: suffix with "
                   "--suffix-cache, else off)");
  parser.AddString("speculator", &f.speculator,
                   "--speculative lstm|suffix+lstm: an Arctic speculator folder (config.json + model.safetensors)");
  parser.AddString("speculative-selection", &f.speculative_selection,
                   "suffix+lstm: which draft a sequence verifies: acceptance (measured per request; default) | score");
  parser.AddBool("speculative-tree", &f.speculative_tree,
                 "--speculative suffix: draft trees (k nodes, verified in one pass under a tree mask)");
  parser.AddBool("speculative-reference-compatible", &f.speculative_reference_compatible,
                 "--speculative suffix: Arctic Inference's drafts exactly (default: Floe's drafting mode, "
                 "docs/suffix-cache.md)");
  parser.AddString("speculative-default-namespace", &f.speculative_default_namespace,
                   "suffix-tree namespace of requests that name none (default: the shared default namespace)");
  parser.AddInt("num-speculative-tokens", &f.num_speculative_tokens,
                "draft tokens per sequence per step, at most (the cost model trims; <= 64)");
  parser.AddInt("speculative-token-threshold", &f.speculative_token_threshold,
                "a step verifies at most (this - its other tokens) drafts; none at or above it");
  parser.AddString("speculative-cost-curve", &f.speculative_cost_curve,
                   "the step cost curve the draft budget plans on: measure (a few forward passes at start), "
                   "roofline (--device cuda: from the GPU's bandwidth and bf16 rate, no passes), "
                   "linear (--speculative-step-overhead-tokens + tokens), a JSON file "
                   "{\"step_cost_curve\": [[tokens, ms], ...]} (bench_verify_cost --write-curve), "
                   "or auto: roofline on an H100 or H200, measure elsewhere (a file named auto, measure, "
                   "roofline or linear: ./NAME)");
  parser.AddDouble("speculative-step-overhead-tokens", &f.speculative_step_overhead_tokens,
                   "--speculative-cost-curve linear: a step's fixed cost in tokens' worth of compute; "
                   "< 0: no cost model (threshold only)");
  parser.AddString("suffix-cache", &f.suffix_cache,
                   "--speculative suffix only: floe-suffix-cache HOST:PORT,... for the global tree");
  parser.AddBool("benchmark-forced-decoding", &f.benchmark_forced_decoding,
                 "benchmarks only: requests may carry forced_output_ids, emitted instead of sampled tokens");
  parser.AddInt("tensor-parallel-size", &f.tensor_parallel_size,
                "T: the model's weights are sharded over T ranks (processes; rank 0 is this one)");
  parser.AddInt("sequence-parallel-size", &f.sequence_parallel_size,
                "S: T x S ranks; a step runs Ulysses SP over S (its rows split, attention by heads) with TP over "
                "T inside, or TP over all T x S ranks (--parallel-mode)");
  parser.AddString("parallel-mode", &f.parallel_mode,
                   "tp|sp|shift: every step TP over all ranks, every step SP x TP, or per step by its scheduled "
                   "tokens (default: shift with S > 1)");
  parser.AddInt64("shift-threshold", &f.shift_threshold,
                  "shift: steps of at least this many scheduled tokens run SP x TP (0: from the cost model)");
  parser.AddString("shift-profile", &f.shift_profile,
                   "shift: each step runs the mode measured faster at its size in this bench_shift output "
                   "(JSON) instead of one threshold");
  parser.AddInt("threads-per-rank", &f.threads_per_rank,
                "compute threads of each rank with several ranks (0: cores / ranks)");
  parser.AddInt("rank", &f.rank, "internal: this process's rank (set by rank 0 for the ranks it starts)");
  parser.AddString("rank-dir", &f.rank_dir, "internal: the ranks' rendezvous folder (set by rank 0)");
  parser.AddString("rank-launch", &f.rank_launch,
                   "local|remote: rank 0 starts the other ranks as child processes, or waits for ranks started "
                   "elsewhere (each: the same flags plus --rank R --rank-store RANK0_HOST:PORT --rank-host ITS_IP)");
  parser.AddString("rank-store", &f.rank_store,
                   "ranks > 0 started elsewhere: rank 0's worker address, where they meet the others");
  parser.AddString("rank-host", &f.rank_host, "the address this rank's collectives listen on (its pod IP)");
  parser.AddInt("structured-output-cache-size", &f.structured_output_cache_size,
                "compiled structured-output grammars kept (least recently used dropped first; 0: none), shared "
                "by all requests");
  parser.AddInt("structured-output-compile-timeout-ms", &f.structured_output_compile_timeout_ms,
                "a structured output whose grammar and token masks take longer to compile is refused "
                "(INVALID_ARGUMENT)");
  parser.AddBool("structured-output-drafts", &f.structured_output_drafts,
                 "cut constrained requests' drafts to their grammar and draft the tokens it forces (=false: "
                 "verify proposers' drafts as they come, a benchmark baseline)");
}

}  // namespace floe
