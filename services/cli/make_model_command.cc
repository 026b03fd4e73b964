// floe make-model: a Hugging Face checkpoint folder with seeded random weights.
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/cli/arg_parser.h"
#include "services/cli/commands.h"
#include "services/worker/model/checkpoint_writer.h"

namespace floe {

int RunMakeModel(int argc, char** argv) {
  std::string preset = "tiny", dtype = "bf16", tokenizer, out, architecture;
  uint64_t seed = 0;
  int shards = 1;
  ArgParser parser("floe make-model --preset tiny|llama-3.2-1b|tiny-swiftkv|llama-3.2-1b-swiftkv --dtype bf16|fp32 "
                   "--tokenizer DIR_OR_FILE --out DIR",
                   "Writes config.json, generation_config.json, safetensors weights (seeded random) and the\n"
                   "tokenizer files into DIR: a real Hugging Face checkpoint folder at the preset's shapes.\n"
                   "-swiftkv presets: LlamaSwiftKVForCausalLM with SwiftKV on over the second half of the layers.");
  parser.AddString("preset", &preset, absl::StrCat("shape preset: ", absl::StrJoin(CheckpointPresetNames(), "|")));
  parser.AddString("dtype", &dtype, "bf16|fp32|fp16");
  parser.AddString("tokenizer", &tokenizer, "tokenizer.json or a folder with it (and tokenizer_config.json)");
  parser.AddString("out", &out, "output folder");
  parser.AddString("architecture", &architecture, "override: MistralForCausalLM|Qwen2ForCausalLM|Qwen3ForCausalLM");
  parser.AddUint64("seed", &seed, "weight seed");
  parser.AddInt("shards", &shards, "number of safetensors shards (>1 writes an index)");
  if (auto exit_code = parser.ParseOrExitCode(argc, argv, "floe make-model")) return *exit_code;
  if (out.empty()) {
    std::fprintf(stderr, "floe make-model: --out is required\n");
    return 2;
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
  std::fprintf(stderr, "writing %s checkpoint (%s) to %s ...\n", preset.c_str(), dtype.c_str(), out.c_str());
  if (absl::Status s = WriteRandomCheckpoint(spec, out); !s.ok()) {
    std::fprintf(stderr, "floe make-model: %s\n", std::string(s.message()).c_str());
    return 1;
  }
  std::fprintf(stderr, "done\n");
  return 0;
}

}  // namespace floe
