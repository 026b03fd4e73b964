// Writes a seeded random Arctic speculator sized for a base model, in the
// format LstmSpeculator loads (ArcticTraining's config.json and state_dict
// names, as safetensors): what `floe make-model --preset speculator` makes,
// for tests and benchmarks. Weights follow the trainer's reset_parameters:
// matrices and embeddings N(0, 1/sqrt(min(shape))), norms weight 1 bias 0.
// Tied duplicates (input/cell/output_emb, head.1..) are written once.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "common/tensor/dtype.h"

namespace floe {

struct SpeculatorSpec {
  std::string method = "sum_lstm";  // sum_lstm | sum_rnn
  int n_predict = 3;
  int64_t hidden_size = 0;  // the base model's (input_hidden_dim)
  int64_t vocab_size = 0;
  int64_t dim = 0;          // inner = emb = proj; 0: hidden_size (Arctic's Llama recipe)
  bool tie_weights = true;
  bool scale_input = true;
  DType dtype = DType::kBF16;
  uint64_t seed = 0;
  std::string base_model;   // base_model_name_or_path
};

absl::Status WriteRandomSpeculator(const SpeculatorSpec& spec, const std::string& dir);

}  // namespace floe
