// Tiny random Llama-family models built in memory for backend tests, plus a
// driver for greedy generation through a Backend's paged KV cache.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/tensor/dtype.h"
#include "services/worker/backend/backend.h"
#include "services/worker/model/checkpoint.h"

namespace floe::testing_model {

// kSwiftKV: Llama 3 as LlamaSwiftKVForCausalLM, SwiftKV on over the second
// half of its layers (plus their *_proj_swiftkv and norm_swiftkv).
enum class Flavor { kLlama3, kQwen2, kQwen3, kSwiftKV };

// Owns the weight buffers behind `weights`. Matrices are stored in `dtype`;
// norms and biases in f32. Values are seeded: N(0, 1/sqrt(in)) for matrices.
class TestModel {
 public:
  TestModel(Flavor flavor, DType dtype, uint64_t seed, int vocab = 512, int layers = 2);
  TestModel(const TestModel&) = delete;

  const ModelConfig& config() const { return config_; }
  const ModelWeights& weights() const { return weights_; }

  // Writes config.txt (with `steps`) and <hf name>.bin (f32, the exact values the backend
  // sees) for reference_llama.py.
  void WriteReferenceFiles(const std::string& dir, int steps) const;

 private:
  TensorView Add(const std::string& name, std::vector<int64_t> shape, float scale, float offset,
                 bool matrix);

  ModelConfig config_;
  ModelWeights weights_;
  DType dtype_;
  uint64_t seed_;
  std::vector<std::pair<std::string, std::vector<float>>> values_;  // exact f32 values
  std::vector<std::vector<uint16_t>> bf16_;
};

// Prefills `prompt` in chunks of `chunk` tokens (0: all at once), then decodes
// `steps` greedy tokens one at a time. Every prompt row's logits are asked
// for, or with `last_logits_only` only the last prompt row's (as the engine
// asks: earlier chunks want none), which is then all prompt_logits holds. Blocks are assigned from `first_block`
// upwards in reverse order, so logical and physical order differ.
struct Generation {
  std::vector<std::vector<float>> prompt_logits;  // logits of each prompt position
  std::vector<std::vector<float>> prompt_hidden;  // Backend::LastHiddenStates of each prompt position
  std::vector<int32_t> tokens;
  std::vector<std::vector<float>> step_logits;  // logits that chose each token
};
Generation Generate(Backend& backend, const std::vector<int32_t>& prompt, int steps, int chunk,
                    int block_size, int first_block, int max_blocks, bool last_logits_only = false);

int32_t Argmax(const std::vector<float>& v);

// Writes config.txt for reference_llama.py (plus "steps N"). With bf16 weights
// the reference rounds every linear layer's input to bf16, the backend's
// precision contract (kernels/cpu/matmul.h).
void WriteReferenceConfig(const ModelConfig& config, DType weight_dtype, int steps,
                          const std::string& dir);

}  // namespace floe::testing_model
