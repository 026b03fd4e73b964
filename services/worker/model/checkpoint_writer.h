// Writes a Hugging Face style checkpoint folder of seeded random weights
// (config.json, generation_config.json, model.safetensors or shards with
// model.safetensors.index.json, optionally the tokenizer files), for tests,
// benchmarks and `floe make-model`. Weights equal what Checkpoint::Load gives
// with LoadFormat::kDummy and the same seed and dtype.
//
// Single-threaded caller; filling uses all cores. Writes one tensor at a time,
// so memory stays near the largest tensor (the embeddings).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/tensor/dtype.h"
#include "services/worker/model/model_config.h"

namespace floe {

struct CheckpointSpec {
  // "tiny" (2 layers, hidden 64, vocab 128256: fits the Llama 3 tokenizer) or
  // "llama-3.2-1b" (the real model's shapes, tied embeddings).
  std::string preset = "tiny";
  // "" keeps the preset's LlamaForCausalLM; "MistralForCausalLM",
  // "Qwen2ForCausalLM" (adds q/k/v biases) or "Qwen3ForCausalLM" (adds q/k norms).
  std::string architecture;
  DType dtype = DType::kBF16;  // bf16 or f32 (f16 also works)
  uint64_t seed = 0;
  int num_shards = 1;  // 1: model.safetensors; N > 1: N shards plus the index
  // "" for none; a tokenizer.json file, or a folder holding tokenizer.json
  // (required) and tokenizer_config.json (copied when present).
  std::string tokenizer_source;
};

std::vector<std::string> CheckpointPresetNames();

// The config a preset (and architecture override) describes; INVALID_ARGUMENT
// naming the preset or architecture when unknown.
absl::StatusOr<ModelConfig> PresetConfig(absl::string_view preset,
                                         absl::string_view architecture = "");

// Creates out_dir if needed and (over)writes the checkpoint files in it.
absl::Status WriteRandomCheckpoint(const CheckpointSpec& spec, const std::string& out_dir);

}  // namespace floe
