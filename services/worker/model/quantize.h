// Weight quantization to compressed-tensors 8-bit checkpoints: what
// `floe make-model --quantize` writes and the benchmarks build in memory.
// Symmetric, one scale per output channel: scale = absmax(row) / 127 (i8,
// rounded to nearest even and clamped to [-127, 127]) or / 448 (f8_e4m3,
// rounded to nearest even), an all-zero row getting scale 1.
//
// Pure functions; QuantizeCheckpoint is single-threaded and holds the
// quantized tensors in memory until it writes them.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/tensor/tensor_view.h"
#include "services/worker/model/model_config.h"

namespace floe {

struct QuantizedMatrix {
  DType dtype = DType::kI8;
  std::vector<int64_t> shape;
  std::vector<uint8_t> data;  // row-major [rows, cols], one byte per weight
  std::vector<float> scales;  // [rows]
  // A view for the backends (row_scale set); valid while this lives.
  TensorView View() const;
};

// `w` ([rows, cols], f32, bf16 or f16) quantized per output row to `target`
// (kI8 or kF8E4M3). INVALID_ARGUMENT for another dtype or target, or a
// non-finite weight.
absl::StatusOr<QuantizedMatrix> QuantizePerChannel(const TensorView& w, DType target);

// The quantization_config make-model writes: float (kF8E4M3) with dynamic
// per-token activations, as vLLM's FP8-dynamic checkpoints; int (kI8)
// weight-only in the pack-quantized format, as llm-compressor's W8A16 (the
// only int8 weight-only layout vLLM loads). lm_head stays dense (ignored),
// as quantizers leave it.
WeightQuantization QuantizationFor(DType target);

// Reads the dense checkpoint in `from_dir` (config.json + safetensors) and
// writes `out_dir`: config.json with quantization_config, model.safetensors
// with each quantized Linear weight (fp8: `weight`; int8: `weight_packed`
// and `weight_shape`) and its weight_scale ([rows, 1] f32),
// every other tensor as it was, and the tokenizer and generation files.
// `keep_dense` names more Linear modules to leave dense (listed in
// `ignore` with lm_head), e.g. "model.layers.0.mlp.down_proj"; a name that
// is not a Linear of the model is an error.
absl::Status QuantizeCheckpoint(const std::string& from_dir, const std::string& out_dir, DType target,
                                const std::vector<std::string>& keep_dense = {});

}  // namespace floe
