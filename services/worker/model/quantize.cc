#include "services/worker/model/quantize.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "common/safetensors/safetensors_writer.h"
#include "common/status/status_macros.h"
#include "services/worker/model/checkpoint.h"
#include "services/worker/model/weight_layout.h"

namespace floe {
namespace fs = std::filesystem;

TensorView QuantizedMatrix::View() const {
  TensorView v{dtype, shape, data.data()};
  v.row_scale = scales.data();
  return v;
}

QuantizedMatrix QuantizePerChannel(const TensorView& w, DType target) {
  QuantizedMatrix q;
  q.dtype = target;
  q.shape = {w.rows(), w.cols()};
  const int64_t rows = w.rows(), cols = w.cols();
  q.data.resize(rows * cols);
  q.scales.resize(rows);
  std::vector<float> row(cols);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      row[c] = w.dtype == DType::kBF16 ? Bf16ToF32(static_cast<const uint16_t*>(w.data)[r * cols + c])
                                       : static_cast<const float*>(w.data)[r * cols + c];
    }
    float absmax = 0;
    for (float v : row) absmax = std::max(absmax, std::abs(v));
    const float scale = absmax > 0 ? absmax / (target == DType::kI8 ? 127.0f : 448.0f) : 1.0f;
    q.scales[r] = scale;
    uint8_t* out = q.data.data() + r * cols;
    for (int64_t c = 0; c < cols; ++c) {
      const float v = row[c] / scale;
      out[c] = target == DType::kI8
                   ? static_cast<uint8_t>(static_cast<int8_t>(std::clamp(std::nearbyint(v), -127.0f, 127.0f)))
                   : F32ToF8E4M3(v);
    }
  }
  return q;
}

WeightQuantization QuantizationFor(DType target) {
  WeightQuantization q;
  q.enabled = true;
  q.is_float = target == DType::kF8E4M3;
  q.per_channel = true;
  q.format = q.is_float ? "float-quantized" : "int-quantized";
  q.ignore = {"lm_head"};
  if (q.is_float) {
    q.input_activations_json =
        R"({"num_bits":8,"type":"float","symmetric":true,"strategy":"token","dynamic":true})";
  }
  return q;
}

absl::Status QuantizeCheckpoint(const std::string& from_dir, const std::string& out_dir, DType target) {
  if (!IsQuantized(target)) return absl::InvalidArgumentError("quantize: the target must be i8 or f8_e4m3");
  FLOE_ASSIGN_OR_RETURN(std::unique_ptr<Checkpoint> source, Checkpoint::Load(from_dir, {}));
  ModelConfig config = source->config();
  if (config.quantization.enabled) {
    return absl::InvalidArgumentError(absl::StrCat(from_dir, " is already quantized (quantization_config)"));
  }
  config.quantization = QuantizationFor(target);
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot create ", out_dir, ": ", ec.message()));
  for (const char* file : {"tokenizer.json", "tokenizer_config.json", "generation_config.json",
                           "special_tokens_map.json"}) {
    if (fs::exists(fs::path(from_dir) / file)) {
      fs::copy_file(fs::path(from_dir) / file, fs::path(out_dir) / file, fs::copy_options::overwrite_existing, ec);
      if (ec) return absl::InternalError(absl::StrCat("cannot copy ", file, ": ", ec.message()));
    }
  }
  ModelWeights weights = source->weights();
  SafetensorsWriter writer;
  for (const WeightSpec& spec : ExpectedWeights(config)) {
    const TensorView view = WeightSlot(weights, spec);
    const std::string module = QuantizedLinear(config.quantization, spec);
    if (module.empty()) {
      FLOE_RETURN_IF_ERROR(writer.AddLazy(spec.name, view.dtype, view.shape, [view](uint8_t* out, size_t bytes) {
        std::memcpy(out, view.data, bytes);
      }));
      continue;
    }
    QuantizedMatrix q = QuantizePerChannel(view, target);
    std::vector<uint8_t> scale_bytes(q.scales.size() * sizeof(float));
    std::memcpy(scale_bytes.data(), q.scales.data(), scale_bytes.size());
    FLOE_RETURN_IF_ERROR(writer.Add(module + ".weight_scale", DType::kF32, {view.rows(), 1}, std::move(scale_bytes)));
    FLOE_RETURN_IF_ERROR(writer.Add(spec.name, target, view.shape, std::move(q.data)));
  }
  fs::remove(fs::path(out_dir) / "model.safetensors.index.json", ec);
  FLOE_RETURN_IF_ERROR(writer.Write((fs::path(out_dir) / "model.safetensors").string()));
  // config.json last: a folder with it is complete.
  std::ofstream out(fs::path(out_dir) / "config.json", std::ios::trunc);
  out << config.ToJson();
  out.close();
  if (!out) return absl::InternalError(absl::StrCat("cannot write ", out_dir, "/config.json"));
  return absl::OkStatus();
}

}  // namespace floe
