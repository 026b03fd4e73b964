// Fuzzes the model config.json parser (services/worker/model/model_config).
// Invariants of an accepted config: every size is positive, the head layout
// divides (num_heads % num_kv_heads == 0, head_dim > 0), every float is
// finite and positive, llama3 rope scaling has high > low frequency factor,
// every integer field holds exactly the integer the file gave (no silent
// truncation); and FromJson(ToJson(c)) gives back c exactly (the header's
// promise).
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>

#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"
#include "services/worker/model/model_config.h"
#include "tests/fuzz/fuzz_check.h"

namespace floe {
namespace {

bool SameFloat(float a, float b) { return std::memcmp(&a, &b, sizeof(a)) == 0; }

bool PositiveFinite(float x) { return std::isfinite(x) && x > 0; }

bool Same(const ModelConfig& a, const ModelConfig& b) {
  return a.architecture == b.architecture && a.architecture_name == b.architecture_name &&
         a.vocab_size == b.vocab_size && a.hidden_size == b.hidden_size &&
         a.intermediate_size == b.intermediate_size && a.num_layers == b.num_layers && a.num_heads == b.num_heads &&
         a.num_kv_heads == b.num_kv_heads && a.head_dim == b.head_dim &&
         a.max_position_embeddings == b.max_position_embeddings && SameFloat(a.rms_norm_eps, b.rms_norm_eps) &&
         SameFloat(a.rope_theta, b.rope_theta) && a.rope_scaling.type == b.rope_scaling.type &&
         SameFloat(a.rope_scaling.factor, b.rope_scaling.factor) &&
         SameFloat(a.rope_scaling.low_freq_factor, b.rope_scaling.low_freq_factor) &&
         SameFloat(a.rope_scaling.high_freq_factor, b.rope_scaling.high_freq_factor) &&
         a.rope_scaling.original_max_position_embeddings == b.rope_scaling.original_max_position_embeddings &&
         a.tie_word_embeddings == b.tie_word_embeddings && a.attention_bias == b.attention_bias &&
         a.qk_norm == b.qk_norm && a.swiftkv == b.swiftkv && a.num_key_value_layers == b.num_key_value_layers &&
         a.bos_token_id == b.bos_token_id && a.eos_token_ids == b.eos_token_ids && a.torch_dtype == b.torch_dtype &&
         a.quantization.enabled == b.quantization.enabled && a.quantization.is_float == b.quantization.is_float &&
         a.quantization.per_channel == b.quantization.per_channel && a.quantization.format == b.quantization.format &&
         a.quantization.ignore == b.quantization.ignore &&
         a.quantization.input_activations_json == b.quantization.input_activations_json;
}

// The integer the file gave for `key` (absent, null or not an integer: no check).
void CheckInt(const nlohmann::json& j, const char* key, int64_t parsed) {
  if (!j.is_object()) return;
  auto it = j.find(key);
  if (it == j.end() || !it->is_number_integer()) return;
  const bool same = it->is_number_unsigned() ? it->get<uint64_t>() == static_cast<uint64_t>(parsed)
                                             : it->get<int64_t>() == parsed;
  FUZZ_CHECK(same && parsed >= 0, "%s is %s in the file, parsed as %lld", key, it->dump().c_str(),
             static_cast<long long>(parsed));
}

}  // namespace
}  // namespace floe

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace floe;
  auto config = ModelConfig::FromJson(absl::string_view(reinterpret_cast<const char*>(data), size));
  if (!config.ok()) {
    FUZZ_CHECK(config.status().code() == absl::StatusCode::kInvalidArgument, "%s",
               config.status().ToString().c_str());
    return 0;
  }
  const ModelConfig& c = *config;
  FUZZ_CHECK(c.vocab_size > 0 && c.hidden_size > 0 && c.intermediate_size > 0 && c.num_layers > 0 &&
                 c.num_heads > 0 && c.num_kv_heads > 0 && c.head_dim > 0 && c.max_position_embeddings > 0,
             "a non-positive size was accepted");
  FUZZ_CHECK(c.num_heads % c.num_kv_heads == 0, "heads %d not divisible by kv heads %d", c.num_heads,
             c.num_kv_heads);
  FUZZ_CHECK(PositiveFinite(c.rms_norm_eps) && PositiveFinite(c.rope_theta), "rms_norm_eps %g, rope_theta %g",
             c.rms_norm_eps, c.rope_theta);
  if (!c.rope_scaling.type.empty()) {
    FUZZ_CHECK(c.rope_scaling.type == "llama3" || c.rope_scaling.type == "linear", "rope type %s",
               c.rope_scaling.type.c_str());
    FUZZ_CHECK(PositiveFinite(c.rope_scaling.factor), "rope factor %g", c.rope_scaling.factor);
    if (c.rope_scaling.type == "llama3") {
      FUZZ_CHECK(PositiveFinite(c.rope_scaling.low_freq_factor) && PositiveFinite(c.rope_scaling.high_freq_factor) &&
                     c.rope_scaling.high_freq_factor > c.rope_scaling.low_freq_factor &&
                     c.rope_scaling.original_max_position_embeddings > 0,
             "llama3 rope scaling low %g high %g original %d", c.rope_scaling.low_freq_factor,
             c.rope_scaling.high_freq_factor, c.rope_scaling.original_max_position_embeddings);
    }
  }
  FUZZ_CHECK(c.bos_token_id >= -1, "bos %d", c.bos_token_id);
  for (int id : c.eos_token_ids) FUZZ_CHECK(id >= 0, "eos %d", id);
  const nlohmann::json j = nlohmann::json::parse(data, data + size, nullptr, /*allow_exceptions=*/false);
  CheckInt(j, "vocab_size", c.vocab_size);
  CheckInt(j, "hidden_size", c.hidden_size);
  CheckInt(j, "intermediate_size", c.intermediate_size);
  CheckInt(j, "num_hidden_layers", c.num_layers);
  CheckInt(j, "num_attention_heads", c.num_heads);
  CheckInt(j, "num_key_value_heads", c.num_kv_heads);
  CheckInt(j, "head_dim", c.head_dim);
  CheckInt(j, "max_position_embeddings", c.max_position_embeddings);
  CheckInt(j, "bos_token_id", c.bos_token_id);
  if (c.rope_scaling.type == "llama3") {
    CheckInt(j.at("rope_scaling"), "original_max_position_embeddings", c.rope_scaling.original_max_position_embeddings);
  }
  const std::string json = c.ToJson();
  auto again = ModelConfig::FromJson(json);
  FUZZ_CHECK(again.ok(), "ToJson output does not parse: %s\n%s", again.status().ToString().c_str(), json.c_str());
  FUZZ_CHECK(Same(c, *again), "FromJson(ToJson(c)) != c:\n%s\n%s", json.c_str(), again->ToJson().c_str());
  return 0;
}
