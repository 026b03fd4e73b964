// The hyper-parameters of a Llama-family checkpoint, parsed from HF config.json.
#pragma once

#include <string>
#include "absl/strings/string_view.h"
#include <vector>

#include "absl/status/statusor.h"

namespace floe {

enum class Architecture { kLlama, kMistral, kQwen2, kQwen3 };

struct RopeScaling {
  // "" (none), "llama3" or "linear". Other types are rejected at parse time.
  std::string type;
  float factor = 1.0f;
  float low_freq_factor = 1.0f;
  float high_freq_factor = 4.0f;
  int original_max_position_embeddings = 8192;
};

struct ModelConfig {
  Architecture architecture = Architecture::kLlama;
  std::string architecture_name;  // as written in config.json, e.g. "LlamaForCausalLM"
  int vocab_size = 0;
  int hidden_size = 0;
  int intermediate_size = 0;
  int num_layers = 0;
  int num_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;  // hidden_size / num_heads unless config.json says otherwise
  int max_position_embeddings = 0;
  float rms_norm_eps = 1e-5f;
  float rope_theta = 10000.0f;
  RopeScaling rope_scaling;
  bool tie_word_embeddings = false;
  bool attention_bias = false;  // q/k/v projections carry a bias (Qwen2)
  bool qk_norm = false;         // per-head RMSNorm on q and k (Qwen3)
  int bos_token_id = -1;
  std::vector<int> eos_token_ids;
  std::string torch_dtype;  // "bfloat16", "float32", ...

  // Parses and validates; errors name the offending field. Absent optional
  // fields take Hugging Face's defaults: num_key_value_heads = heads, head_dim =
  // hidden/heads, rope_theta 10000, rms_norm_eps 1e-6, tie_word_embeddings false.
  static absl::StatusOr<ModelConfig> FromJson(absl::string_view json_text);
  static absl::StatusOr<ModelConfig> FromFile(const std::string& path);

  // config.json text for this config (with model_type, so Hugging Face
  // transformers loads it too); FromJson(ToJson()) gives back an equal config.
  std::string ToJson() const;
};

// The config.json spelling ("LlamaForCausalLM", ...).
absl::string_view ArchitectureName(Architecture architecture);
// Fails (naming the architecture and listing the supported ones) for others.
absl::StatusOr<Architecture> ParseArchitecture(absl::string_view name);

}  // namespace floe
