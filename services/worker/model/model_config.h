// The hyper-parameters of a Llama-family checkpoint, parsed from HF config.json.
#pragma once

#include <string>
#include "absl/strings/string_view.h"
#include <vector>

#include "absl/status/statusor.h"

namespace floe {

// kLlamaSwiftKV: Snowflake's LlamaSwiftKVForCausalLM (model_type
// llama_swiftkv), Llama's math plus the SwiftKV tensors (see ModelConfig::swiftkv).
enum class Architecture { kLlama, kMistral, kQwen2, kQwen3, kLlamaSwiftKV };

struct RopeScaling {
  // "" (none), "llama3" or "linear". Other types are rejected at parse time.
  std::string type;
  float factor = 1.0f;
  float low_freq_factor = 1.0f;
  float high_freq_factor = 4.0f;
  int original_max_position_embeddings = 8192;
};

// compressed-tensors weight quantization (quantization_config with
// quant_method "compressed-tensors", as vLLM loads it): 8-bit weights of the
// Linear layers with a symmetric scale per output channel or per tensor.
// Activation schemes (dynamic or static) are accepted and ignored: the CPU
// computes with bf16 activations.
struct WeightQuantization {
  bool enabled = false;
  bool is_float = true;     // weights.type: "float" (f8_e4m3) or "int" (i8)
  bool per_channel = true;  // weights.strategy: "channel" or "tensor"
  // "float-quantized", "int-quantized", "naive-quantized" (one weight
  // tensor per module) or "pack-quantized" (int only: weight_packed, int32
  // words of four q + 128 bytes, and weight_shape; vLLM's W8A16 layout).
  std::string format;
  bool packed() const { return format == "pack-quantized"; }
  // Linear modules left dense, by name ("lm_head", "model.layers.0.mlp.down_proj").
  std::vector<std::string> ignore;
  // input_activations as written (null when absent), kept for ToJson.
  std::string input_activations_json;
  // kv_cache_scheme (8-bit float, per tensor, static): each attention layer
  // has self_attn.k_scale and v_scale, read by --kv-cache-dtype fp8_e4m3.
  // Independent of `enabled`: a checkpoint may quantize only its KV cache.
  bool kv_cache_scales = false;
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
  // SwiftKV (LlamaSwiftKVForCausalLM only): with `swiftkv` on, every token
  // runs layers [0, num_key_value_layers); the K/V of the later layers come
  // from one projection of that layer stack's output (norm_swiftkv, then each
  // layer's k/v_proj_swiftkv), and only the tokens whose logits are wanted
  // run the later layers (their queries from q_proj_swiftkv). With it off the
  // checkpoint is a plain Llama (its dense q/k/v_proj in every layer).
  bool swiftkv = false;
  int num_key_value_layers = 0;  // num_layers unless a SwiftKV config says otherwise
  // The layers every token runs: num_key_value_layers under SwiftKV, else all.
  int dense_layers() const { return swiftkv ? num_key_value_layers : num_layers; }
  int bos_token_id = -1;
  std::vector<int> eos_token_ids;
  std::string torch_dtype;  // "bfloat16", "float32", ...
  WeightQuantization quantization;

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
