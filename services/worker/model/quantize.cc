#include "services/worker/model/quantize.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>

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

absl::StatusOr<QuantizedMatrix> QuantizePerChannel(const TensorView& w, DType target) {
  if (!IsQuantized(target)) return absl::InvalidArgumentError("quantize: the target must be i8 or f8_e4m3");
  if (IsQuantized(w.dtype) || w.shape.size() != 2) {
    return absl::InvalidArgumentError(absl::StrCat("quantize: expected a dense matrix, got ", DTypeName(w.dtype), " ",
                                                   ShapeToString(w.shape)));
  }
  QuantizedMatrix q;
  q.dtype = target;
  q.shape = {w.rows(), w.cols()};
  const int64_t rows = w.rows(), cols = w.cols();
  const float code_max = target == DType::kI8 ? 127.0f : 448.0f;
  q.data.resize(rows * cols);
  q.scales.resize(rows);
  std::vector<float> row(cols);
  for (int64_t r = 0; r < rows; ++r) {
    WidenToF32(w.dtype, w.data, r * cols, cols, row.data());
    float absmax = 0;
    for (int64_t c = 0; c < cols; ++c) {
      if (!std::isfinite(row[c])) {
        return absl::InvalidArgumentError(absl::StrCat("quantize: weight [", r, ", ", c, "] is ", row[c]));
      }
      absmax = std::max(absmax, std::abs(row[c]));
    }
    // A normal scale, so that no weight divides into infinity (a row far
    // below it quantizes to zeros, as it would in bf16).
    const float scale = absmax > 0 ? std::max(absmax / code_max, std::numeric_limits<float>::min()) : 1.0f;
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
  q.format = q.is_float ? "float-quantized" : "pack-quantized";
  q.ignore = {"lm_head"};
  if (q.is_float) {
    q.input_activations_json =
        R"({"num_bits":8,"type":"float","symmetric":true,"strategy":"token","dynamic":true})";
  }
  return q;
}

absl::Status QuantizeCheckpoint(const std::string& from_dir, const std::string& out_dir, DType target,
                                const std::vector<std::string>& keep_dense) {
  if (!IsQuantized(target)) return absl::InvalidArgumentError("quantize: the target must be i8 or f8_e4m3");
  FLOE_ASSIGN_OR_RETURN(std::unique_ptr<Checkpoint> source, Checkpoint::Load(from_dir, {}));
  ModelConfig config = source->config();
  if (config.quantization.enabled) {
    return absl::InvalidArgumentError(absl::StrCat(from_dir, " is already quantized (quantization_config)"));
  }
  config.quantization = QuantizationFor(target);
  const std::vector<WeightSpec> specs = ExpectedWeights(config);
  for (const std::string& module : keep_dense) {
    const bool linear = std::any_of(specs.begin(), specs.end(), [&](const WeightSpec& spec) {
      return spec.name == module + ".weight" && !QuantizedLinear(config.quantization, spec).empty();
    });
    if (!linear) {
      return absl::InvalidArgumentError(absl::StrCat(
          "quantize: ", module, " is not a quantizable Linear module of ", from_dir,
          " (names look like model.layers.0.mlp.down_proj; lm_head is always left dense)"));
    }
    config.quantization.ignore.push_back(module);
  }
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot create ", out_dir, ": ", ec.message()));
  if (fs::equivalent(from_dir, out_dir, ec)) {
    return absl::InvalidArgumentError(absl::StrCat("quantize: ", out_dir, " is the source folder; write elsewhere"));
  }
  // Everything but weights and the config goes along as it is: the
  // tokenizer's files, generation_config.json, a chat template, a README.
  // Weights in any format (a folder may hold PyTorch or GGUF copies too)
  // and their indexes stay behind.
  auto is_weights = [](const std::string& name) {
    for (const char* suffix : {".safetensors", ".bin", ".pt", ".pth", ".gguf", ".h5", ".msgpack", ".onnx",
                               ".index.json"}) {
      if (name.ends_with(suffix)) return true;
    }
    return false;
  };
  for (const fs::directory_entry& entry : fs::directory_iterator(from_dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (!entry.is_regular_file() || name == "config.json" || is_weights(name)) continue;
    fs::copy_file(entry.path(), fs::path(out_dir) / name, fs::copy_options::overwrite_existing, ec);
    if (ec) return absl::InternalError(absl::StrCat("cannot copy ", name, ": ", ec.message()));
  }
  if (ec) return absl::InternalError(absl::StrCat("cannot list ", from_dir, ": ", ec.message()));
  ModelWeights weights = source->weights();
  SafetensorsWriter writer;
  for (const WeightSpec& spec : specs) {
    const TensorView view = WeightSlot(weights, spec);
    const std::string module = QuantizedLinear(config.quantization, spec);
    if (module.empty()) {
      FLOE_RETURN_IF_ERROR(writer.AddLazy(spec.name, view.dtype, view.shape, [view](uint8_t* out, size_t bytes) {
        std::memcpy(out, view.data, bytes);
      }));
      continue;
    }
    if (config.quantization.packed() && view.cols() % 4 != 0) {
      return absl::InvalidArgumentError(absl::StrCat(spec.name, ": ", view.cols(),
                                                     " columns do not fill int32 words of four 8-bit weights"));
    }
    absl::StatusOr<QuantizedMatrix> quantized = QuantizePerChannel(view, target);
    if (!quantized.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(spec.name, ": ", quantized.status().message()));
    }
    QuantizedMatrix& q = *quantized;
    std::vector<uint8_t> scale_bytes(q.scales.size() * sizeof(float));
    std::memcpy(scale_bytes.data(), q.scales.data(), scale_bytes.size());
    FLOE_RETURN_IF_ERROR(writer.Add(module + ".weight_scale", DType::kF32, {view.rows(), 1}, std::move(scale_bytes)));
    if (!config.quantization.packed()) {
      FLOE_RETURN_IF_ERROR(writer.Add(spec.name, target, view.shape, std::move(q.data)));
      continue;
    }
    // pack-quantized: int32 words of four q + 128 bytes, first in the low
    // byte, so on this little-endian machine the bytes are q ^ 0x80 in order.
    for (uint8_t& byte : q.data) byte ^= 0x80;
    FLOE_RETURN_IF_ERROR(writer.Add(module + ".weight_packed", "I32", {view.rows(), view.cols() / 4}, std::move(q.data)));
    const int64_t shape[2] = {view.rows(), view.cols()};
    std::vector<uint8_t> shape_bytes(sizeof(shape));
    std::memcpy(shape_bytes.data(), shape, sizeof(shape));
    FLOE_RETURN_IF_ERROR(writer.Add(module + ".weight_shape", "I64", {2}, std::move(shape_bytes)));
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
