#include "services/worker/model/checkpoint_writer.h"

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "common/safetensors/safetensors_writer.h"
#include "common/safetensors/sharded_safetensors.h"
#include "common/status/status_macros.h"
#include "nlohmann/json.hpp"
#include "services/worker/model/weight_fill.h"
#include "services/worker/model/weight_layout.h"

namespace floe {
namespace {

namespace fs = std::filesystem;

ModelConfig Llama32Base() {
  ModelConfig c;
  c.architecture = Architecture::kLlama;
  c.architecture_name = "LlamaForCausalLM";
  c.vocab_size = 128256;
  c.max_position_embeddings = 131072;
  c.rms_norm_eps = 1e-5f;
  c.rope_theta = 500000.0f;
  c.rope_scaling.type = "llama3";
  c.rope_scaling.factor = 32.0f;
  c.rope_scaling.low_freq_factor = 1.0f;
  c.rope_scaling.high_freq_factor = 4.0f;
  c.rope_scaling.original_max_position_embeddings = 8192;
  c.bos_token_id = 128000;
  c.eos_token_ids = {128001, 128008, 128009};
  return c;
}

absl::Status WriteText(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  if (!out) return absl::InternalError(absl::StrCat("cannot write ", path.string()));
  return absl::OkStatus();
}

absl::Status CopyTokenizer(const std::string& source, const fs::path& out_dir) {
  std::error_code ec;
  fs::path from(source);
  std::vector<fs::path> files;
  if (fs::is_directory(from, ec)) {
    if (!fs::exists(from / "tokenizer.json", ec)) {
      return absl::NotFoundError(absl::StrCat("tokenizer source ", source, " has no tokenizer.json"));
    }
    files.push_back(from / "tokenizer.json");
    if (fs::exists(from / "tokenizer_config.json", ec)) files.push_back(from / "tokenizer_config.json");
  } else if (fs::is_regular_file(from, ec)) {
    files.push_back(from);
  } else {
    return absl::NotFoundError(absl::StrCat("tokenizer source ", source, " does not exist"));
  }
  for (size_t i = 0; i < files.size(); ++i) {
    // A lone file becomes tokenizer.json whatever it was called.
    fs::path target = out_dir / (i == 0 ? fs::path("tokenizer.json") : files[i].filename());
    fs::copy_file(files[i], target, fs::copy_options::overwrite_existing, ec);
    if (ec) {
      return absl::InternalError(
          absl::StrCat("cannot copy ", files[i].string(), " to ", target.string(), ": ", ec.message()));
    }
  }
  return absl::OkStatus();
}

// Contiguous runs of tensors, each shard about total/num_shards bytes and none empty.
std::vector<int> AssignShards(const std::vector<WeightSpec>& specs, DType dtype, int num_shards) {
  std::vector<uint64_t> bytes;
  uint64_t total = 0;
  for (const WeightSpec& spec : specs) {
    uint64_t b = DTypeSize(dtype);
    for (int64_t dim : spec.shape) b *= static_cast<uint64_t>(dim);
    bytes.push_back(b);
    total += b;
  }
  std::vector<int> shard_of(specs.size());
  int shard = 0;
  uint64_t in_shard = 0;
  for (size_t i = 0; i < specs.size(); ++i) {
    size_t tensors_left = specs.size() - i;
    size_t shards_after = static_cast<size_t>(num_shards - 1 - shard);
    bool full = in_shard > 0 && in_shard + bytes[i] / 2 > total / num_shards;
    if (shard + 1 < num_shards && in_shard > 0 && (full || tensors_left == shards_after)) {
      ++shard;
      in_shard = 0;
    }
    shard_of[i] = shard;
    in_shard += bytes[i];
  }
  return shard_of;
}

const char* TorchDtype(DType dtype) {
  switch (dtype) {
    case DType::kF32: return "float32";
    case DType::kF16: return "float16";
    case DType::kBF16: return "bfloat16";
    default: return "";
  }
}

}  // namespace

std::vector<std::string> CheckpointPresetNames() {
  return {"tiny", "llama-3.2-1b", "llama-3.1-8b", "llama-3.1-70b", "qwen3-32b", "tiny-swiftkv", "llama-3.2-1b-swiftkv"};
}

absl::StatusOr<ModelConfig> PresetConfig(absl::string_view preset, absl::string_view architecture) {
  // X-swiftkv: preset X as a LlamaSwiftKVForCausalLM checkpoint with SwiftKV
  // on over its second half (tiny-swiftkv has 4 layers, so 2 skipped).
  if (absl::ConsumeSuffix(&preset, "-swiftkv")) {
    if (preset != "tiny" && preset != "llama-3.2-1b") {
      return absl::InvalidArgumentError(absl::StrCat("unknown preset \"", preset, "-swiftkv\" (supported: ",
                                                     absl::StrJoin(CheckpointPresetNames(), ", "), ")"));
    }
    if (!architecture.empty()) {
      return absl::InvalidArgumentError("a -swiftkv preset is LlamaSwiftKVForCausalLM: no architecture override");
    }
    FLOE_ASSIGN_OR_RETURN(ModelConfig c, PresetConfig(preset, ""));
    if (preset == "tiny") c.num_layers = 4;
    c.architecture = Architecture::kLlamaSwiftKV;
    c.architecture_name = "LlamaSwiftKVForCausalLM";
    c.swiftkv = true;
    c.num_key_value_layers = c.num_layers / 2;
    return c;
  }
  ModelConfig c = Llama32Base();
  if (preset == "tiny") {
    c.num_layers = 2;
    c.hidden_size = 64;
    c.num_heads = 4;
    c.num_kv_heads = 2;
    c.head_dim = 16;
    c.intermediate_size = 128;
    c.tie_word_embeddings = false;
  } else if (preset == "llama-3.2-1b") {
    c.num_layers = 16;
    c.hidden_size = 2048;
    c.num_heads = 32;
    c.num_kv_heads = 8;
    c.head_dim = 64;
    c.intermediate_size = 8192;
    c.tie_word_embeddings = true;
  } else if (preset == "llama-3.1-8b" || preset == "llama-3.1-70b") {
    const bool big = preset == "llama-3.1-70b";
    c.num_layers = big ? 80 : 32;
    c.hidden_size = big ? 8192 : 4096;
    c.num_heads = big ? 64 : 32;
    c.num_kv_heads = 8;
    c.head_dim = 128;
    c.intermediate_size = big ? 28672 : 14336;
    c.rope_scaling.factor = 8.0f;  // Llama 3.1's (3.2: 32)
    c.tie_word_embeddings = false;
  } else if (preset == "qwen3-32b") {
    c.architecture = Architecture::kQwen3;
    c.architecture_name = "Qwen3ForCausalLM";
    c.qk_norm = true;
    c.vocab_size = 151936;
    c.num_layers = 64;
    c.hidden_size = 5120;
    c.num_heads = 64;
    c.num_kv_heads = 8;
    c.head_dim = 128;
    c.intermediate_size = 25600;
    c.rope_theta = 1000000.0f;
    c.rope_scaling = {};
    c.bos_token_id = -1;
    c.eos_token_ids = {151645, 151643};
    c.tie_word_embeddings = false;
  } else {
    return absl::InvalidArgumentError(absl::StrCat("unknown preset \"", preset, "\" (supported: ",
                                                   absl::StrJoin(CheckpointPresetNames(), ", "), ")"));
  }
  if (!architecture.empty()) {
    FLOE_ASSIGN_OR_RETURN(c.architecture, ParseArchitecture(architecture));
    c.architecture_name = std::string(architecture);
    c.attention_bias = c.architecture == Architecture::kQwen2;
    c.qk_norm = c.architecture == Architecture::kQwen3;
  }
  c.num_key_value_layers = c.num_layers;  // as config.json parsing sets it
  return c;
}

absl::Status WriteRandomCheckpoint(const CheckpointSpec& spec, const std::string& out_dir) {
  FLOE_ASSIGN_OR_RETURN(ModelConfig config, PresetConfig(spec.preset, spec.architecture));
  config.torch_dtype = TorchDtype(spec.dtype);
  std::vector<WeightSpec> weights = ExpectedWeights(config);
  if (spec.num_shards < 1 || static_cast<size_t>(spec.num_shards) > weights.size()) {
    return absl::InvalidArgumentError(absl::StrCat("num_shards ", spec.num_shards,
                                                   " must be in [1, ", weights.size(), "]"));
  }
  fs::path dir(out_dir);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return absl::InternalError(absl::StrCat("cannot create ", out_dir, ": ", ec.message()));

  FLOE_RETURN_IF_ERROR(WriteText(dir / "config.json", config.ToJson()));
  nlohmann::ordered_json generation;
  generation["bos_token_id"] = config.bos_token_id;
  generation["eos_token_id"] = config.eos_token_ids;
  FLOE_RETURN_IF_ERROR(WriteText(dir / "generation_config.json", generation.dump(2) + "\n"));
  if (!spec.tokenizer_source.empty()) FLOE_RETURN_IF_ERROR(CopyTokenizer(spec.tokenizer_source, dir));

  // Leftovers of an earlier layout in the same folder would shadow this one.
  fs::remove(dir / kSafetensorsIndexFile, ec);
  fs::remove(dir / kSafetensorsSingleFile, ec);

  std::vector<int> shard_of = AssignShards(weights, spec.dtype, spec.num_shards);
  std::vector<SafetensorsWriter> writers(spec.num_shards);
  for (size_t i = 0; i < weights.size(); ++i) {
    const WeightSpec& weight = weights[i];
    FLOE_RETURN_IF_ERROR(writers[shard_of[i]].AddLazy(
        weight.name, spec.dtype, weight.shape,
        [&weight, &spec](uint8_t* out, size_t) { FillGeneratedWeight(weight, spec.dtype, spec.seed, out); }));
  }
  if (spec.num_shards == 1) return writers[0].Write((dir / kSafetensorsSingleFile).string());

  nlohmann::ordered_json index;
  uint64_t total = 0;
  for (const SafetensorsWriter& writer : writers) total += writer.data_bytes();
  index["metadata"] = {{"total_size", total}};
  index["weight_map"] = nlohmann::ordered_json::object();
  std::vector<std::string> shard_names;
  for (int s = 0; s < spec.num_shards; ++s) {
    shard_names.push_back(absl::StrFormat("model-%05d-of-%05d.safetensors", s + 1, spec.num_shards));
    FLOE_RETURN_IF_ERROR(writers[s].Write((dir / shard_names.back()).string()));
  }
  for (size_t i = 0; i < weights.size(); ++i) {
    index["weight_map"][weights[i].name] = shard_names[shard_of[i]];
  }
  // The index goes last: its presence marks the shards complete.
  return WriteText(dir / kSafetensorsIndexFile, index.dump(2) + "\n");
}

}  // namespace floe
