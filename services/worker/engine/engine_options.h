#pragma once

#include <cstdint>
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
  // Upper bound on a request's max_tokens; also the default when unset.
  int max_tokens_limit = 4096;
  bool enable_prefix_caching = true;
  // EOS ids of the served model (from its tokenizer/generation config).
  std::vector<int32_t> eos_token_ids;
};

}  // namespace floe
