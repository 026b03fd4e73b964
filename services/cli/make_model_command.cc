// floe make-model: a Hugging Face checkpoint folder with seeded random
// weights, or (--quantize) a compressed-tensors 8-bit one.
#include <cstdio>
#include <filesystem>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/cli/arg_parser.h"
#include "services/cli/commands.h"
#include "services/worker/model/checkpoint_writer.h"
#include "services/worker/model/model_config.h"
#include "services/worker/model/quantize.h"
#include "services/worker/speculation/speculator_writer.h"

namespace floe {

int RunMakeModel(int argc, char** argv) {
  std::string preset = "tiny", dtype = "bf16", tokenizer, out, architecture, quantize, from, keep_dense, base;
  std::string method = "sum_lstm";
  int n_predict = 3;
  uint64_t seed = 0;
  int shards = 1;
  ArgParser parser("floe make-model --preset tiny|llama-3.2-1b|tiny-swiftkv|llama-3.2-1b-swiftkv --dtype bf16|fp32 "
                   "--tokenizer DIR_OR_FILE --out DIR",
                   "Writes config.json, generation_config.json, safetensors weights (seeded random) and the\n"
                   "tokenizer files into DIR: a real Hugging Face checkpoint folder at the preset's shapes.\n"
                   "-swiftkv presets: LlamaSwiftKVForCausalLM with SwiftKV on over the second half of the layers.\n"
                   "--quantize fp8|int8: the checkpoint in vLLM's compressed-tensors format (8-bit Linear weights\n"
                   "with a scale per output channel; lm_head stays dense), from --from DIR (any dense checkpoint)\n"
                   "or from the preset's random weights.\n"
                   "--preset speculator --base MODEL_DIR: a random Arctic speculator (sum_lstm, n_predict 3, dims =\n"
                   "the base model's hidden size) sized for that model, for --speculative lstm.");
  parser.AddString("preset", &preset, absl::StrCat("shape preset: ", absl::StrJoin(CheckpointPresetNames(), "|")));
  parser.AddString("dtype", &dtype, "bf16|fp32|fp16");
  parser.AddString("tokenizer", &tokenizer, "tokenizer.json or a folder with it (and tokenizer_config.json)");
  parser.AddString("out", &out, "output folder");
  parser.AddString("architecture", &architecture, "override: MistralForCausalLM|Qwen2ForCausalLM|Qwen3ForCausalLM");
  parser.AddUint64("seed", &seed, "weight seed");
  parser.AddInt("shards", &shards, "number of safetensors shards (>1 writes an index)");
  parser.AddString("quantize", &quantize, "fp8|int8: write a compressed-tensors checkpoint (float8_e4m3fn or int8 weights)");
  parser.AddString("from", &from, "with --quantize: the dense checkpoint folder to quantize (default: the preset's)");
  parser.AddString("keep-dense", &keep_dense,
                   "with --quantize: comma-separated Linear modules to leave dense besides lm_head, e.g. "
                   "model.layers.0.mlp.down_proj (q|k|v and gate|up go together)");
  parser.AddString("base", &base, "--preset speculator: the base model folder (its config.json sets the sizes)");
  parser.AddString("method", &method, "--preset speculator: sum_lstm|sum_rnn");
  parser.AddInt("n-predict", &n_predict, "--preset speculator: draft tokens per step (1..16)");
  if (auto exit_code = parser.ParseOrExitCode(argc, argv, "floe make-model")) return *exit_code;
  if (out.empty()) {
    std::fprintf(stderr, "floe make-model: --out is required\n");
    return 2;
  }
  if ((preset == "speculator") == base.empty()) {
    std::fprintf(stderr, "floe make-model: --base MODEL_DIR goes with --preset speculator, and only there\n");
    return 2;
  }
  if (preset == "speculator") {
    if (!quantize.empty() || !from.empty() || !tokenizer.empty() || !architecture.empty() || shards != 1) {
      std::fprintf(stderr,
                   "floe make-model: --preset speculator takes --base, --out, --dtype, --seed, --method and "
                   "--n-predict only\n");
      return 2;
    }
    auto base_config = ModelConfig::FromFile(base + "/config.json");
    if (!base_config.ok()) {
      std::fprintf(stderr, "floe make-model: --base: %s\n", std::string(base_config.status().message()).c_str());
      return 2;
    }
    auto parsed = ParseDTypeName(dtype);
    SpeculatorSpec spec;
    spec.method = method;
    spec.n_predict = n_predict;
    spec.tie_weights = true;
    spec.hidden_size = base_config->hidden_size;
    spec.vocab_size = base_config->vocab_size;
    spec.dtype = parsed.ok() ? *parsed : DType::kF16;  // f16 is refused below
    spec.seed = seed;
    spec.base_model = base;
    std::fprintf(stderr, "writing a %s speculator (n_predict %d, dim %lld) for %s to %s ...\n", method.c_str(),
                 n_predict, static_cast<long long>(spec.hidden_size), base.c_str(), out.c_str());
    if (absl::Status s = WriteRandomSpeculator(spec, out); !s.ok()) {
      std::fprintf(stderr, "floe make-model: %s\n", std::string(s.message()).c_str());
      return s.code() == absl::StatusCode::kInvalidArgument ? 2 : 1;
    }
    std::fprintf(stderr, "done\n");
    return 0;
  }
  DType target = DType::kBF16;
  if (quantize == "fp8") {
    target = DType::kF8E4M3;
  } else if (quantize == "int8") {
    target = DType::kI8;
  } else if (!quantize.empty()) {
    std::fprintf(stderr, "floe make-model: --quantize takes fp8 or int8, got \"%s\"\n", quantize.c_str());
    return 2;
  }
  if ((!from.empty() || !keep_dense.empty()) && quantize.empty()) {
    std::fprintf(stderr, "floe make-model: --from and --keep-dense need --quantize\n");
    return 2;
  }
  std::vector<std::string> dense_modules;
  for (absl::string_view module : absl::StrSplit(keep_dense, ',', absl::SkipWhitespace())) {
    dense_modules.emplace_back(absl::StripAsciiWhitespace(module));
  }
  if (!from.empty()) {
    // The shapes, weights and tokenizer come from the folder.
    if (preset != "tiny" || dtype != "bf16" || !tokenizer.empty() || !architecture.empty() || seed != 0 ||
        shards != 1) {
      std::fprintf(stderr,
                   "floe make-model: --from quantizes that folder as it is; --preset, --dtype, --tokenizer, "
                   "--architecture, --seed and --shards do not apply\n");
      return 2;
    }
    std::fprintf(stderr, "quantizing %s to %s in %s ...\n", from.c_str(), quantize.c_str(), out.c_str());
    if (absl::Status s = QuantizeCheckpoint(from, out, target, dense_modules); !s.ok()) {
      std::fprintf(stderr, "floe make-model: %s\n", std::string(s.message()).c_str());
      return 1;
    }
    std::fprintf(stderr, "done\n");
    return 0;
  }
  auto parsed_dtype = ParseDTypeName(dtype);
  if (!parsed_dtype.ok()) {
    std::fprintf(stderr, "floe make-model: --dtype: %s\n", std::string(parsed_dtype.status().message()).c_str());
    return 2;
  }
  CheckpointSpec spec;
  spec.preset = preset;
  spec.architecture = architecture;
  spec.dtype = *parsed_dtype;
  spec.seed = seed;
  spec.num_shards = shards;
  spec.tokenizer_source = tokenizer;
  // --quantize: the dense checkpoint goes to a folder beside OUT first.
  const std::string dense_dir = quantize.empty() ? out : out + ".dense-tmp";
  std::fprintf(stderr, "writing %s checkpoint (%s) to %s ...\n", preset.c_str(), dtype.c_str(), dense_dir.c_str());
  absl::Status s = WriteRandomCheckpoint(spec, dense_dir);
  if (s.ok() && !quantize.empty()) {
    std::fprintf(stderr, "quantizing to %s in %s ...\n", quantize.c_str(), out.c_str());
    s = QuantizeCheckpoint(dense_dir, out, target, dense_modules);
  }
  if (!quantize.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(dense_dir, ec);
  }
  if (!s.ok()) {
    std::fprintf(stderr, "floe make-model: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  std::fprintf(stderr, "done\n");
  return 0;
}

}  // namespace floe
