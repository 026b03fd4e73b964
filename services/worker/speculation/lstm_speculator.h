// Arctic's model-based speculators (ArcticTraining's ArcticLSTMSpeculator,
// served by Arctic Inference as "mlp_speculator"): from the target's final
// hidden state and the token sampled there, n_predict recurrent steps each
// predict one more token (greedy, argmax).
//
//   sum_lstm, step k:  x = k == 0 ? scale(hidden) : h
//     pre = Proj_{min(k,1)}(x) + a * [Emb_f | Emb_i | Emb_o | Emb_c](token)
//     f, i, o = sigmoid(pre_f, pre_i, pre_o); c = c * f + GELU(LN_cell(pre_c)) * i
//     h = GELU(LN_state(c)) * o;  token = argmax(Head(h))          (c starts at 0)
//   sum_rnn, step k:   h = LN_k(Proj_k(x) + a * Emb_k(token)), GELU, token = argmax(Head_k(h))
//     (Emb, Proj and LN are small chains when a dim is dotted: "a.b" = stacked)
//
// with scale(x) = x / rms(x) / sqrt(2) when scale_input, LN = x * rsqrt(mean(x^2)
// + 1e-6) * w + b (no centring), a = emb_weight / state_weight,
// state_weight = 0.5^(0.5 / n_predict), emb_weight = sqrt((1 - state_weight^2)
// * emb_dim[-1] / 2). tie_weights shares Emb, LN and Head over steps and Proj
// from step 1 on; tie_lstm_embs feeds one embedding to all four gates.
//
// Checkpoint: config.json as ArcticTraining writes it (dims may be strings)
// and model.safetensors holding that module's state_dict names (an optional
// "speculator." prefix is accepted); scripts/convert_speculator.py turns the
// pytorch_model.bin the trainer saves into that. Errors name the file,
// tensor or field at fault.
//
// Compute: f32 activations over the CPU kernels' packed matrices (bf16
// weights round each matmul input to bf16, as the target's matmuls do). The
// forward is batched over sequences; each row's result does not depend on the
// batch (the kernels are batch-invariant).
//
// Thread-safety: Load's result is immutable except for Draft's scratch:
// one thread drafts at a time (the engine thread).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace floe {

struct SpeculatorConfig {
  enum class Method { kSumLstm, kSumRnn };
  Method method = Method::kSumLstm;
  int n_predict = 0;
  int64_t input_hidden_dim = 0;
  int64_t vocab_size = 0;
  std::vector<int64_t> inner_dim, emb_dim, proj_dim;  // dotted: stacked layers
  bool tie_weights = false;
  bool tie_lstm_embs = false;
  bool scale_input = false;

  // INVALID_ARGUMENT naming the field: model_type other than
  // mlp_speculator, an unknown method, a dim that is not a positive integer
  // (or a dotted list of them), n_predict outside [1, 16], sum_lstm without
  // tie_weights (as the reference requires) or with dims that do not line up.
  static absl::StatusOr<SpeculatorConfig> FromJson(absl::string_view json_text);
  absl::string_view method_name() const { return method == Method::kSumLstm ? "sum_lstm" : "sum_rnn"; }
  // The state width that reaches the heads.
  int64_t state_dim() const { return method == Method::kSumLstm ? proj_dim[0] : inner_dim.back(); }
};

class LstmSpeculator {
 public:
  // `dir` holds config.json and model.safetensors. num_threads: the matmul
  // pool (counting the caller).
  static absl::StatusOr<std::unique_ptr<LstmSpeculator>> Load(const std::string& dir, int num_threads);
  ~LstmSpeculator();

  const SpeculatorConfig& config() const;
  // FAILED_PRECONDITION naming both sides when the speculator was not made
  // for a model of this hidden size and vocabulary.
  absl::Status CheckFits(int64_t hidden_size, int64_t vocab_size, absl::string_view model_name) const;

  // Drafts s = min(steps, n_predict) tokens for each of the m =
  // tokens.size() rows: hidden is [m, input_hidden_dim] (the target's final
  // normed hidden state that sampled tokens[r]), out is [m, s] (row stride
  // s). Token ids must be in range (the engine's are); spans too short draft
  // nothing. `states`, when given, receives each step's
  // state h as [m, state_dim] (tests compare it with the reference).
  void Draft(std::span<const float> hidden, std::span<const int32_t> tokens, int steps, std::span<int32_t> out,
             std::vector<std::vector<float>>* states = nullptr);

  // Bytes of the packed weights (the embeddings are read from the mapping).
  size_t WeightBytes() const;

 private:
  struct Impl;
  explicit LstmSpeculator(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace floe
