// floe-worker's own flags (the ones every service shares, --host, --port,
// --metrics-port, --drain-timeout-s, TLS, keys, are
// common/service/service_bootstrap.h's). worker_plan.h checks them.
//
// Thread: main's, at start.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace floe {

class ArgParser;

struct WorkerFlags {
  std::string model;
  std::string model_name;
  std::string load_format = "auto";
  std::string weight_cache = "auto";  // auto: MODEL/.floe-cache; off: none
  double weight_cache_max_gb = 64;
  std::string dummy_dtype = "bf16";
  int threads = 0;
  int block_size = 16;
  double kv_cache_gb = 1.0;              // 0: auto (KvCacheBudgetBytes)
  double kv_cache_auto_fraction = 0.4;   // auto's cap: this share of MemAvailable
  std::string kv_cache_dtype = "auto";  // auto|f32|bf16|fp8_e4m3|fp8 (CPU)
  std::string device = "auto";
  double gpu_memory_utilization = 0.9;
  bool enforce_eager = false;
  int max_num_batched_tokens = 512;
  int max_num_seqs = 64;
  int max_waiting = 256;
  int max_model_len = 0;
  int max_tokens_limit = 4096;
  bool no_prefix_caching = false;
  std::string speculative;  // empty: suffix with --suffix-cache, otherwise off
  std::string speculator;
  std::string speculative_selection = "acceptance";
  int num_speculative_tokens = 32;
  int speculative_token_threshold = 512;
  double speculative_step_overhead_tokens = 1.0;
  std::string speculative_cost_curve = "auto";
  std::string suffix_cache;
  bool benchmark_forced_decoding = false;
  bool speculative_tree = false;
  bool speculative_reference_compatible = false;
  std::string speculative_default_namespace;
  int tensor_parallel_size = 1;
  int sequence_parallel_size = 1;
  int threads_per_rank = 0;
  std::string parallel_mode;  // empty: shift with S > 1, else tp
  int64_t shift_threshold = 0;  // 0: from the cost model
  std::string shift_profile;    // bench_shift JSON: the measured faster mode per step size
  int rank = 0;          // internal: > 0 in the ranks rank 0 starts
  std::string rank_dir;  // internal: their rendezvous folder
  // Ranks started elsewhere (another pod or machine): rank 0 does not fork
  // them and serves the rendezvous store on its port; they find it there.
  std::string rank_launch = "local";
  std::string rank_store;
  std::string rank_host = "127.0.0.1";
  int structured_output_cache_size = 128;
  int structured_output_compile_timeout_ms = 5000;
  bool structured_output_drafts = true;
};

// --weight-cache-max-gb (GiB): floe-worker refuses a value outside [0, 1e6]
// at start (worker_plan.h), and so does floe local, which passes it on.
inline absl::Status CheckWeightCacheMaxGb(double gb) {
  if (gb >= 0 && gb <= 1e6) return absl::OkStatus();  // NaN fails too
  return absl::InvalidArgumentError(absl::StrCat("--weight-cache-max-gb must be in [0, 1e6], got ", gb));
}

void AddWorkerFlags(ArgParser& parser, WorkerFlags* flags);

}  // namespace floe
