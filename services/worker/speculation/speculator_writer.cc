#include "services/worker/speculation/speculator_writer.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "common/safetensors/safetensors_writer.h"
#include "services/worker/model/weight_fill.h"

namespace floe {

absl::Status WriteRandomSpeculator(const SpeculatorSpec& spec, const std::string& dir) {
  if (spec.method != "sum_lstm" && spec.method != "sum_rnn")
    return absl::InvalidArgumentError(absl::StrCat("speculator method must be sum_lstm or sum_rnn, got ", spec.method));
  if (spec.hidden_size < 1 || spec.vocab_size < 1 || spec.n_predict < 1 || spec.n_predict > 16)
    return absl::InvalidArgumentError("speculator: hidden size, vocabulary and n_predict (1..16) must be positive");
  if (spec.method == "sum_lstm" && !spec.tie_weights)
    return absl::InvalidArgumentError("speculator: sum_lstm needs tied weights");
  if (spec.dtype != DType::kBF16 && spec.dtype != DType::kF32)
    return absl::InvalidArgumentError("speculator: dtype must be bf16 or f32");
  const int64_t d = spec.dim > 0 ? spec.dim : spec.hidden_size;
  const int64_t h = spec.hidden_size, v = spec.vocab_size;
  SafetensorsWriter writer;
  absl::Status status;
  auto matrix = [&](const std::string& name, int64_t rows, int64_t cols) {
    if (!status.ok()) return;
    const float stddev = 1.0f / std::sqrt(static_cast<float>(std::min(rows, cols)));
    const uint64_t seed = spec.seed;
    const DType dtype = spec.dtype;
    status = writer.AddLazy(name, dtype, {rows, cols}, [=](uint8_t* out, size_t bytes) {
      FillNormal(dtype, seed, name, stddev, out, bytes / DTypeSize(dtype));
    });
  };
  auto norm = [&](const std::string& name, int64_t dim) {
    if (!status.ok()) return;
    std::vector<uint8_t> ones(dim * DTypeSize(spec.dtype)), zeros(dim * DTypeSize(spec.dtype), 0);
    for (int64_t i = 0; i < dim; ++i) {
      if (spec.dtype == DType::kF32) {
        const float one = 1.0f;
        std::memcpy(ones.data() + i * 4, &one, 4);
      } else {
        const uint16_t one = 0x3F80;  // bf16 1.0
        std::memcpy(ones.data() + i * 2, &one, 2);
      }
    }
    status = writer.Add(name + ".weight", spec.dtype, {dim}, std::move(ones));
    if (status.ok()) status = writer.Add(name + ".bias", spec.dtype, {dim}, std::move(zeros));
  };
  const int heads = spec.tie_weights ? 1 : spec.n_predict;
  if (spec.method == "sum_lstm") {
    matrix("forget_emb.0.weight", v, d);
    for (const char* gate : {"forget", "input", "output", "cell"}) {
      matrix(absl::StrCat(gate, "_proj.0.weight"), d, h);
      if (spec.n_predict > 1) matrix(absl::StrCat(gate, "_proj.1.weight"), d, d);
    }
    norm("cell_ln.0", d);
    norm("state_ln.0", d);
  } else {
    const int embs = spec.tie_weights ? 1 : spec.n_predict;
    const int projs = spec.tie_weights ? std::min(spec.n_predict, 2) : spec.n_predict;
    for (int k = 0; k < embs; ++k) {
      matrix(absl::StrCat("emb.", k, ".0.weight"), v, d);
      norm(absl::StrCat("ln.", k, ".0"), d);
    }
    for (int k = 0; k < projs; ++k) matrix(absl::StrCat("proj.", k, ".0.weight"), d, k == 0 ? h : d);
  }
  for (int k = 0; k < heads; ++k) matrix(absl::StrCat("head.", k, ".weight"), v, d);
  if (!status.ok()) return status;

  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot create ", dir, ": ", ec.message()));
  nlohmann::json config = {
      {"architectures", {"ArcticLSTMSpeculatorPreTrainedModel"}},
      {"base_model_name_or_path", spec.base_model},
      {"input_hidden_dim", h},
      {"inner_dim", std::to_string(d)},
      {"proj_dim", std::to_string(d)},
      {"emb_dim", std::to_string(d)},
      {"model_type", "mlp_speculator"},
      {"n_candidates", spec.n_predict},
      {"n_predict", spec.n_predict},
      {"scale_input", spec.scale_input},
      {"tie_weights", spec.tie_weights},
      {"tie_lstm_embs", true},
      {"top_k_tokens_per_head", std::vector<int>(spec.n_predict, 1)},
      {"torch_dtype", spec.dtype == DType::kBF16 ? "bfloat16" : "float32"},
      {"vocab_size", v},
      {"method", spec.method},
  };
  std::ofstream(dir + "/config.json") << config.dump(2) << "\n";
  return writer.Write(dir + "/model.safetensors");
}

}  // namespace floe
