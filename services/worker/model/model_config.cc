#include "services/worker/model/model_config.h"

#include <charconv>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <limits>
#include <sstream>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "common/status/status_macros.h"
#include "nlohmann/json.hpp"

namespace floe {
namespace {

using Json = nlohmann::json;

struct ArchitectureInfo {
  Architecture architecture;
  const char* name;
  const char* model_type;
};
constexpr ArchitectureInfo kArchitectures[] = {
    {Architecture::kLlama, "LlamaForCausalLM", "llama"},
    {Architecture::kMistral, "MistralForCausalLM", "mistral"},
    {Architecture::kQwen2, "Qwen2ForCausalLM", "qwen2"},
    {Architecture::kQwen3, "Qwen3ForCausalLM", "qwen3"},
    {Architecture::kLlamaSwiftKV, "LlamaSwiftKVForCausalLM", "llama_swiftkv"},
};

absl::Status FieldError(absl::string_view field, absl::string_view why) {
  return absl::InvalidArgumentError(absl::StrCat("config.json field ", field, ": ", why));
}

// Absent and null read the same: HF writes null for "use the default".
const Json* Find(const Json& root, const char* field) {
  auto it = root.find(field);
  return it == root.end() || it->is_null() ? nullptr : &*it;
}

absl::StatusOr<int> ReadInt(const Json& root, const char* field, std::optional<int> fallback,
                            int min_value = 1) {
  const Json* value = Find(root, field);
  if (value == nullptr) {
    if (fallback) return *fallback;
    return FieldError(field, "missing (required)");
  }
  if (!value->is_number_integer() || value->get<int64_t>() < min_value ||
      value->get<int64_t>() > std::numeric_limits<int>::max()) {
    return FieldError(field, absl::StrCat("expected an integer >= ", min_value, ", got ",
                                          value->dump()));
  }
  return static_cast<int>(value->get<int64_t>());
}

absl::StatusOr<float> ReadFloat(const Json* value, absl::string_view field,
                                std::optional<float> fallback) {
  if (value == nullptr) {
    if (fallback) return *fallback;
    return FieldError(field, "missing (required)");
  }
  // Positive as a float too: 1e-50 would become 0, 1e300 infinity.
  const double d = value->is_number() ? value->get<double>() : 0.0;
  if (!(d > 0) || !(d <= std::numeric_limits<float>::max()) || !(static_cast<float>(d) > 0)) {
    return FieldError(field, absl::StrCat("expected a positive number, got ", value->dump()));
  }
  return static_cast<float>(d);
}

absl::StatusOr<RopeScaling> ReadRopeScaling(const Json& root) {
  RopeScaling out;
  const Json* value = Find(root, "rope_scaling");
  if (value == nullptr) return out;
  if (!value->is_object()) return FieldError("rope_scaling", "expected an object or null");
  const Json* type = Find(*value, "rope_type");
  if (type == nullptr) type = Find(*value, "type");
  if (type == nullptr || !type->is_string()) {
    return FieldError("rope_scaling.rope_type", "missing (neither rope_type nor type is set)");
  }
  std::string name = type->get<std::string>();
  if (name == "default") return out;
  if (name != "llama3" && name != "linear") {
    return FieldError("rope_scaling.rope_type",
                      absl::StrCat("unsupported rope type \"", name,
                                   "\" (supported: llama3, linear, default)"));
  }
  out.type = name;
  FLOE_ASSIGN_OR_RETURN(out.factor, ReadFloat(Find(*value, "factor"),
                                              "rope_scaling.factor", std::nullopt));
  if (name == "llama3") {
    FLOE_ASSIGN_OR_RETURN(out.low_freq_factor,
                          ReadFloat(Find(*value, "low_freq_factor"),
                                    "rope_scaling.low_freq_factor", std::nullopt));
    FLOE_ASSIGN_OR_RETURN(out.high_freq_factor,
                          ReadFloat(Find(*value, "high_freq_factor"),
                                    "rope_scaling.high_freq_factor", std::nullopt));
    const Json* original = Find(*value, "original_max_position_embeddings");
    if (original == nullptr || !original->is_number_integer() || original->get<int64_t>() <= 0 ||
        original->get<int64_t>() > std::numeric_limits<int>::max()) {
      return FieldError("rope_scaling.original_max_position_embeddings",
                        "expected a positive integer");
    }
    out.original_max_position_embeddings = original->get<int>();
    if (out.high_freq_factor <= out.low_freq_factor) {
      return FieldError("rope_scaling.high_freq_factor", "must exceed low_freq_factor");
    }
  }
  return out;
}

absl::StatusOr<bool> ReadBool(const Json& root, const char* field, bool fallback) {
  const Json* value = Find(root, field);
  if (value == nullptr) return fallback;
  if (!value->is_boolean()) return FieldError(field, absl::StrCat("expected a bool, got ", value->dump()));
  return value->get<bool>();
}

absl::StatusOr<std::vector<int>> ReadTokenIds(const Json& root, const char* field) {
  const Json* value = Find(root, field);
  std::vector<int> out;
  if (value == nullptr) return out;
  auto add = [&](const Json& id) -> absl::Status {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 ||
        id.get<int64_t>() > std::numeric_limits<int>::max()) {
      return FieldError(field, absl::StrCat("expected a token id, got ", id.dump()));
    }
    out.push_back(id.get<int>());
    return absl::OkStatus();
  };
  if (value->is_array()) {
    for (const Json& id : *value) FLOE_RETURN_IF_ERROR(add(id));
  } else {
    FLOE_RETURN_IF_ERROR(add(*value));
  }
  return out;
}

absl::Status ReadQuantization(const Json& root, WeightQuantization& q);

absl::StatusOr<ModelConfig> Parse(const Json& root) {
  if (!root.is_object()) return absl::InvalidArgumentError("config.json is not a JSON object");
  ModelConfig c;
  const Json* archs = Find(root, "architectures");
  if (archs == nullptr) return FieldError("architectures", "missing (required)");
  if (!archs->is_array() || archs->empty() || !(*archs)[0].is_string()) {
    return FieldError("architectures", "expected a non-empty list of names");
  }
  c.architecture_name = (*archs)[0].get<std::string>();
  FLOE_ASSIGN_OR_RETURN(c.architecture, ParseArchitecture(c.architecture_name));

  FLOE_ASSIGN_OR_RETURN(c.vocab_size, ReadInt(root, "vocab_size", std::nullopt));
  FLOE_ASSIGN_OR_RETURN(c.hidden_size, ReadInt(root, "hidden_size", std::nullopt));
  FLOE_ASSIGN_OR_RETURN(c.intermediate_size, ReadInt(root, "intermediate_size", std::nullopt));
  FLOE_ASSIGN_OR_RETURN(c.num_layers, ReadInt(root, "num_hidden_layers", std::nullopt));
  FLOE_ASSIGN_OR_RETURN(c.num_heads, ReadInt(root, "num_attention_heads", std::nullopt));
  FLOE_ASSIGN_OR_RETURN(c.num_kv_heads, ReadInt(root, "num_key_value_heads", c.num_heads));
  FLOE_ASSIGN_OR_RETURN(c.max_position_embeddings,
                        ReadInt(root, "max_position_embeddings", std::nullopt));
  if (Find(root, "head_dim") != nullptr) {
    FLOE_ASSIGN_OR_RETURN(c.head_dim, ReadInt(root, "head_dim", std::nullopt));
  } else {
    if (c.hidden_size % c.num_heads != 0) {
      return FieldError("hidden_size", absl::StrCat("hidden_size ", c.hidden_size,
                                                    " is not divisible by num_attention_heads ",
                                                    c.num_heads, " (and head_dim is not given)"));
    }
    c.head_dim = c.hidden_size / c.num_heads;
  }
  if (c.num_heads % c.num_kv_heads != 0) {
    return FieldError("num_key_value_heads",
                      absl::StrCat("num_attention_heads ", c.num_heads,
                                   " is not divisible by num_key_value_heads ", c.num_kv_heads));
  }
  FLOE_ASSIGN_OR_RETURN(c.rms_norm_eps,
                        ReadFloat(Find(root, "rms_norm_eps"), "rms_norm_eps", 1e-6f));
  FLOE_ASSIGN_OR_RETURN(c.rope_theta,
                        ReadFloat(Find(root, "rope_theta"), "rope_theta", 10000.0f));
  FLOE_ASSIGN_OR_RETURN(c.rope_scaling, ReadRopeScaling(root));
  FLOE_ASSIGN_OR_RETURN(c.tie_word_embeddings, ReadBool(root, "tie_word_embeddings", false));

  // Qwen2 always has q/k/v biases. Elsewhere attention_bias=true would also
  // put a bias on o_proj (and mlp_bias on the MLP), which the model lacks.
  FLOE_ASSIGN_OR_RETURN(bool attention_bias, ReadBool(root, "attention_bias", false));
  FLOE_ASSIGN_OR_RETURN(bool mlp_bias, ReadBool(root, "mlp_bias", false));
  if (c.architecture != Architecture::kQwen2 && attention_bias) {
    return FieldError("attention_bias", absl::StrCat("true is not supported for ", c.architecture_name));
  }
  if (mlp_bias) return FieldError("mlp_bias", "true is not supported");
  c.attention_bias = c.architecture == Architecture::kQwen2;
  c.qk_norm = c.architecture == Architecture::kQwen3;

  // SwiftKV's fields (Arctic's LlamaSwiftKVConfig): swiftkv defaults to off,
  // num_key_value_layers to every layer; key_value_group_size > 1 (later
  // layers sharing one KV) is a variant no public checkpoint uses.
  c.num_key_value_layers = c.num_layers;
  if (c.architecture == Architecture::kLlamaSwiftKV) {
    FLOE_ASSIGN_OR_RETURN(c.swiftkv, ReadBool(root, "swiftkv", false));
    FLOE_ASSIGN_OR_RETURN(c.num_key_value_layers, ReadInt(root, "num_key_value_layers", c.num_layers));
    if (c.num_key_value_layers > c.num_layers) {
      return FieldError("num_key_value_layers", absl::StrCat(c.num_key_value_layers, " exceeds num_hidden_layers ",
                                                             c.num_layers));
    }
    FLOE_ASSIGN_OR_RETURN(int group, ReadInt(root, "key_value_group_size", 1));
    if (group != 1) return FieldError("key_value_group_size", absl::StrCat(group, " is not supported (only 1)"));
  } else {
    for (const char* field : {"swiftkv", "num_key_value_layers"}) {
      if (Find(root, field) != nullptr) {
        return FieldError(field, absl::StrCat("is a SwiftKV field; ", c.architecture_name,
                                              " has none (LlamaSwiftKVForCausalLM does)"));
      }
    }
  }

  FLOE_ASSIGN_OR_RETURN(std::vector<int> bos, ReadTokenIds(root, "bos_token_id"));
  if (bos.size() > 1) return FieldError("bos_token_id", "expected one token id");
  c.bos_token_id = bos.empty() ? -1 : bos[0];
  FLOE_ASSIGN_OR_RETURN(c.eos_token_ids, ReadTokenIds(root, "eos_token_id"));
  if (const Json* dtype = Find(root, "torch_dtype")) {
    if (!dtype->is_string()) return FieldError("torch_dtype", "expected a string");
    c.torch_dtype = dtype->get<std::string>();
  }
  FLOE_RETURN_IF_ERROR(ReadQuantization(root, c.quantization));
  return c;
}

// kv_cache_scheme: the one scheme vLLM's fp8 KV cache reads from a
// checkpoint (8-bit float, one static scale per tensor: each attention
// layer's k_scale and v_scale).
absl::Status ReadKvCacheScheme(const Json& kv, const std::string& f) {
  if (!kv.is_object()) return FieldError(f, "expected an object");
  const auto expect = [&](const char* key, const Json& want, bool required) -> absl::Status {
    const Json* got = Find(kv, key);
    if (got == nullptr ? required : *got != want) {
      return FieldError(absl::StrCat(f, ".", key), absl::StrCat("expected ", want.dump(), " (an fp8 e4m3 cache with "
                                                                "per-tensor static scales), got ",
                                                                got ? got->dump().substr(0, 64) : "nothing"));
    }
    return absl::OkStatus();
  };
  FLOE_RETURN_IF_ERROR(expect("num_bits", 8, true));
  FLOE_RETURN_IF_ERROR(expect("type", "float", true));
  FLOE_RETURN_IF_ERROR(expect("strategy", "tensor", true));
  FLOE_RETURN_IF_ERROR(expect("dynamic", false, false));
  FLOE_RETURN_IF_ERROR(expect("symmetric", true, false));
  return absl::OkStatus();
}

// quantization_config, validated field by field (errors name the field).
absl::Status ReadQuantization(const Json& root, WeightQuantization& q) {
  const Json* config = Find(root, "quantization_config");
  if (config == nullptr) return absl::OkStatus();
  const std::string f = "quantization_config";
  if (!config->is_object()) return FieldError(f, "expected an object");
  const Json* method = Find(*config, "quant_method");
  if (method == nullptr || !method->is_string() || method->get<std::string>() != "compressed-tensors") {
    return FieldError(f + ".quant_method", absl::StrCat("expected \"compressed-tensors\", got ",
                                                        method ? method->dump() : "nothing"));
  }
  if (const Json* kv = Find(*config, "kv_cache_scheme"); kv != nullptr && !kv->is_null()) {
    FLOE_RETURN_IF_ERROR(ReadKvCacheScheme(*kv, f + ".kv_cache_scheme"));
    q.kv_cache_scales = true;
  }
  const Json* groups = Find(*config, "config_groups");
  // A KV-cache-only checkpoint (dense weights, per-tensor k_scale/v_scale).
  if (q.kv_cache_scales && (groups == nullptr || (groups->is_object() && groups->empty()))) return absl::OkStatus();
  const Json* format = Find(*config, "format");
  if (format == nullptr || !format->is_string()) return FieldError(f + ".format", "expected a string");
  q.format = format->get<std::string>();
  if (q.format != "float-quantized" && q.format != "int-quantized" && q.format != "naive-quantized" &&
      q.format != "pack-quantized") {
    return FieldError(f + ".format", absl::StrCat("\"", q.format,
                                                  "\" is not supported (float-quantized, int-quantized, "
                                                  "naive-quantized, pack-quantized)"));
  }
  if (groups == nullptr || !groups->is_object() || groups->size() != 1) {
    return FieldError(f + ".config_groups", "expected an object with exactly one group");
  }
  const std::string g = absl::StrCat(f, ".config_groups.", groups->begin().key());
  const Json& group = groups->begin().value();
  if (!group.is_object()) return FieldError(g, "expected an object");
  const Json* targets = Find(group, "targets");
  if (targets == nullptr || *targets != Json::array({"Linear"})) {
    return FieldError(g + ".targets", absl::StrCat("expected [\"Linear\"], got ", targets ? targets->dump() : "nothing"));
  }
  const Json* weights = Find(group, "weights");
  if (weights == nullptr || !weights->is_object()) return FieldError(g + ".weights", "expected an object");
  const Json* bits = Find(*weights, "num_bits");
  if (bits == nullptr || *bits != 8) {
    return FieldError(g + ".weights.num_bits", absl::StrCat("expected 8, got ", bits ? bits->dump() : "nothing"));
  }
  const Json* type = Find(*weights, "type");
  if (type == nullptr || (*type != "float" && *type != "int")) {
    return FieldError(g + ".weights.type", absl::StrCat("expected \"float\" or \"int\", got ",
                                                        type ? type->dump() : "nothing"));
  }
  q.is_float = *type == "float";
  if (q.format == "pack-quantized" && q.is_float) {
    return FieldError(f + ".format", "pack-quantized holds int weights; float weights are float-quantized");
  }
  const Json* strategy = Find(*weights, "strategy");
  if (strategy == nullptr || (*strategy != "channel" && *strategy != "tensor")) {
    return FieldError(g + ".weights.strategy", absl::StrCat("expected \"channel\" or \"tensor\", got ",
                                                            strategy ? strategy->dump() : "nothing"));
  }
  q.per_channel = *strategy == "channel";
  const Json* symmetric = Find(*weights, "symmetric");
  if (symmetric != nullptr && *symmetric != true) {
    return FieldError(g + ".weights.symmetric", "only symmetric weight quantization is supported");
  }
  const Json* dynamic = Find(*weights, "dynamic");
  if (dynamic != nullptr && *dynamic != false) {
    return FieldError(g + ".weights.dynamic", "weights must have static scales (dynamic: false)");
  }
  if (const Json* group_size = Find(*weights, "group_size")) {
    return FieldError(g + ".weights.group_size", absl::StrCat("group quantization is not supported, got ",
                                                              group_size->dump()));
  }
  const Json* inputs = Find(group, "input_activations");
  if (inputs != nullptr) {
    const Json* input_bits = inputs->is_object() ? Find(*inputs, "num_bits") : nullptr;
    if (input_bits == nullptr || *input_bits != 8) {
      return FieldError(g + ".input_activations", "expected null or an 8-bit scheme");
    }
    q.input_activations_json = inputs->dump();
  }
  if (const Json* outputs = Find(group, "output_activations")) {
    return FieldError(g + ".output_activations", absl::StrCat("not supported, got ", outputs->dump()));
  }
  if (const Json* ignore = Find(*config, "ignore")) {
    if (!ignore->is_array() || ignore->size() > 4096) {
      return FieldError(f + ".ignore", "expected a list of at most 4096 module names");
    }
    for (const Json& name : *ignore) {
      if (!name.is_string() || name.get<std::string>().empty() || name.get<std::string>().size() > 256) {
        return FieldError(f + ".ignore", absl::StrCat("expected module names of 1 to 256 characters, got ", name.dump()));
      }
      if (name.get<std::string>().rfind("re:", 0) == 0) {
        return FieldError(f + ".ignore", absl::StrCat("regular expressions are not supported, got ", name.dump()));
      }
      q.ignore.push_back(name.get<std::string>());
    }
  }
  q.enabled = true;
  return absl::OkStatus();
}

nlohmann::ordered_json KvCacheSchemeJson() {
  nlohmann::ordered_json kv;
  kv["num_bits"] = 8;
  kv["type"] = "float";
  kv["strategy"] = "tensor";
  kv["dynamic"] = false;
  kv["symmetric"] = true;
  return kv;
}

// The shortest decimal that reads back as `value` (1e-05, not 9.99999974e-06),
// so config.json stays as readable as the ones Hugging Face writes.
double ShortestDouble(float value) {
  char buffer[32];
  auto result = std::to_chars(buffer, buffer + sizeof(buffer) - 1, value);
  *result.ptr = '\0';
  return std::strtod(buffer, nullptr);
}

}  // namespace

absl::string_view ArchitectureName(Architecture architecture) {
  for (const ArchitectureInfo& info : kArchitectures) {
    if (info.architecture == architecture) return info.name;
  }
  return "?";
}

absl::StatusOr<Architecture> ParseArchitecture(absl::string_view name) {
  std::string supported;
  for (const ArchitectureInfo& info : kArchitectures) {
    if (name == info.name) return info.architecture;
    absl::StrAppend(&supported, supported.empty() ? "" : ", ", info.name);
  }
  return FieldError("architectures", absl::StrCat("unsupported architecture \"", name,
                                                  "\" (supported: ", supported, ")"));
}

absl::StatusOr<ModelConfig> ModelConfig::FromJson(absl::string_view json_text) {
  Json root = Json::parse(json_text.begin(), json_text.end(), nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded()) return absl::InvalidArgumentError("config.json is not valid JSON");
  return Parse(root);
}

absl::StatusOr<ModelConfig> ModelConfig::FromFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  std::stringstream text;
  text << in.rdbuf();
  absl::StatusOr<ModelConfig> config = FromJson(text.str());
  if (!config.ok()) {
    return absl::Status(config.status().code(),
                        absl::StrCat(path, ": ", config.status().message()));
  }
  return config;
}

std::string ModelConfig::ToJson() const {
  nlohmann::ordered_json j;
  j["architectures"] = {architecture_name.empty() ? std::string(ArchitectureName(architecture))
                                                  : architecture_name};
  for (const ArchitectureInfo& info : kArchitectures) {
    if (info.architecture == architecture) j["model_type"] = info.model_type;
  }
  j["vocab_size"] = vocab_size;
  j["hidden_size"] = hidden_size;
  j["intermediate_size"] = intermediate_size;
  j["num_hidden_layers"] = num_layers;
  j["num_attention_heads"] = num_heads;
  j["num_key_value_heads"] = num_kv_heads;
  j["head_dim"] = head_dim;
  j["max_position_embeddings"] = max_position_embeddings;
  j["rms_norm_eps"] = ShortestDouble(rms_norm_eps);
  j["rope_theta"] = ShortestDouble(rope_theta);
  if (rope_scaling.type.empty()) {
    j["rope_scaling"] = nullptr;
  } else {
    nlohmann::ordered_json scaling;
    scaling["rope_type"] = rope_scaling.type;
    scaling["factor"] = ShortestDouble(rope_scaling.factor);
    if (rope_scaling.type == "llama3") {
      scaling["low_freq_factor"] = ShortestDouble(rope_scaling.low_freq_factor);
      scaling["high_freq_factor"] = ShortestDouble(rope_scaling.high_freq_factor);
      scaling["original_max_position_embeddings"] = rope_scaling.original_max_position_embeddings;
    }
    j["rope_scaling"] = scaling;
  }
  j["tie_word_embeddings"] = tie_word_embeddings;
  j["hidden_act"] = "silu";
  if (architecture != Architecture::kQwen2) j["attention_bias"] = false;
  if (architecture == Architecture::kLlamaSwiftKV) {
    j["swiftkv"] = swiftkv;
    j["num_key_value_layers"] = num_key_value_layers;
    j["key_value_group_size"] = 1;
  }
  if (bos_token_id >= 0) j["bos_token_id"] = bos_token_id;
  if (eos_token_ids.size() == 1) {
    j["eos_token_id"] = eos_token_ids[0];
  } else if (!eos_token_ids.empty()) {
    j["eos_token_id"] = eos_token_ids;
  }
  if (!torch_dtype.empty()) j["torch_dtype"] = torch_dtype;
  if (quantization.kv_cache_scales && !quantization.enabled) {
    nlohmann::ordered_json config;
    config["quant_method"] = "compressed-tensors";
    config["config_groups"] = nlohmann::ordered_json::object();
    config["kv_cache_scheme"] = KvCacheSchemeJson();
    j["quantization_config"] = config;
  }
  if (quantization.enabled) {
    const WeightQuantization& q = quantization;
    nlohmann::ordered_json weights;
    weights["num_bits"] = 8;
    weights["type"] = q.is_float ? "float" : "int";
    weights["symmetric"] = true;
    weights["strategy"] = q.per_channel ? "channel" : "tensor";
    weights["dynamic"] = false;
    nlohmann::ordered_json group;
    group["targets"] = {"Linear"};
    group["weights"] = weights;
    group["input_activations"] = q.input_activations_json.empty()
                                     ? nlohmann::ordered_json(nullptr)
                                     : nlohmann::ordered_json::parse(q.input_activations_json);
    nlohmann::ordered_json config;
    config["quant_method"] = "compressed-tensors";
    config["format"] = q.format;
    config["config_groups"] = {{"group_0", group}};
    config["ignore"] = q.ignore;
    config["quantization_status"] = "compressed";
    if (q.kv_cache_scales) config["kv_cache_scheme"] = KvCacheSchemeJson();
    j["quantization_config"] = config;
  }
  return j.dump(2) + "\n";
}

}  // namespace floe
