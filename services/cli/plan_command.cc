// floe plan: the Shift Parallelism cost model as a tool. Predicts TTFT,
// TPOT, throughput and completion time for DP, TP, SP and shift on N GPUs
// across load (services/worker/parallel/serving_plan.h), from a checkpoint's
// config.json or a preset's shapes and the GPU's named figures.
#include <cstdio>
#include <filesystem>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/cli/arg_parser.h"
#include "nlohmann/json.hpp"
#include "services/cli/commands.h"
#include "services/worker/model/checkpoint_writer.h"
#include "services/worker/parallel/serving_plan.h"

namespace floe {
namespace {

absl::StatusOr<ModelConfig> LoadModel(const std::string& model) {
  if (std::filesystem::is_directory(model)) return ModelConfig::FromFile((std::filesystem::path(model) / "config.json").string());
  return PresetConfig(model);
}

}  // namespace

int RunPlan(int argc, char** argv) {
  std::string model, gpu_name = "h100", interconnect = "nvlink", dtype = "bf16", concurrency;
  int gpus = 8;
  bool json = false;
  Workload workload;
  ArgParser parser(
      "floe plan --model DIR_OR_PRESET --gpus N --gpu h100|h200 [--interconnect nvlink] [--json]",
      "Predicts time to first token, time per output token, throughput and completion time of serving a model on\n"
      "N GPUs as data parallel replicas (dp), tensor parallel (tp), Ulysses sequence parallel (sp) and Shift\n"
      "Parallelism (shift), across load, from Floe's cost model (docs/shift-parallelism.md). Presets: " +
          absl::StrJoin(CheckpointPresetNames(), ", ") + ".");
  parser.AddString("model", &model, "checkpoint folder (its config.json) or preset name");
  parser.AddInt("gpus", &gpus, "GPUs (1-64)");
  parser.AddString("gpu", &gpu_name, "h100|h200");
  parser.AddString("interconnect", &interconnect, "nvlink|pcie");
  parser.AddString("dtype", &dtype, "weights: bf16|fp8 (fp8: one byte per weight, twice the GEMM rate)");
  parser.AddInt64("prompt-tokens", &workload.prompt_tokens, "tokens in per request");
  parser.AddInt64("output-tokens", &workload.output_tokens, "tokens out per request");
  parser.AddString("concurrency", &concurrency, "requests in flight, comma-separated (default 1,2,4,...,256)");
  parser.AddBool("json", &json, "JSON on stdout instead of a table");
  if (auto exit_code = parser.ParseOrExitCode(argc, argv, "floe plan")) return *exit_code;
  if (model.empty()) return std::fprintf(stderr, "floe plan: --model is required\n"), 2;
  if (gpus < 1 || gpus > 64) return std::fprintf(stderr, "floe plan: --gpus must be in [1, 64], got %d\n", gpus), 2;
  if (workload.prompt_tokens < 1 || workload.prompt_tokens > (1 << 20) || workload.output_tokens < 1 ||
      workload.output_tokens > (1 << 20))
    return std::fprintf(stderr, "floe plan: --prompt-tokens and --output-tokens must be in [1, 1048576]\n"), 2;
  if (!concurrency.empty()) {
    workload.concurrency.clear();
    for (absl::string_view c : absl::StrSplit(concurrency, ',')) {
      int64_t v = 0;
      if (!absl::SimpleAtoi(c, &v) || v < 1 || v > 65536)
        return std::fprintf(stderr, "floe plan: --concurrency: \"%s\" is not in [1, 65536]\n", std::string(c).c_str()), 2;
      workload.concurrency.push_back(v);
    }
    if (workload.concurrency.size() > 64) return std::fprintf(stderr, "floe plan: --concurrency: at most 64 values\n"), 2;
  }
  auto config = LoadModel(model);
  if (!config.ok()) return std::fprintf(stderr, "floe plan: --model: %s\n", std::string(config.status().message()).c_str()), 2;
  auto gpu = GpuByName(gpu_name);
  if (!gpu.ok()) return std::fprintf(stderr, "floe plan: --gpu: %s\n", std::string(gpu.status().message()).c_str()), 2;
  if (interconnect == "pcie") {
    gpu->link_bandwidth = kPcieBandwidth;
  } else if (interconnect != "nvlink") {
    return std::fprintf(stderr, "floe plan: --interconnect must be nvlink or pcie\n"), 2;
  }
  if (dtype == "fp8") {
    gpu->weight_bytes = 1;
    gpu->flops *= 2;
  } else if (dtype != "bf16") {
    return std::fprintf(stderr, "floe plan: --dtype must be bf16 or fp8\n"), 2;
  }
  const ServingPlan plan = PlanServing(*config, *gpu, gpus, workload);
  if (json) {
    nlohmann::json out = {{"model", model},
                          {"gpus", gpus},
                          {"gpu", gpu->name},
                          {"interconnect", interconnect},
                          {"dtype", dtype},
                          {"prompt_tokens", workload.prompt_tokens},
                          {"output_tokens", workload.output_tokens},
                          {"weight_bytes", plan.weight_bytes},
                          {"shift_threshold", plan.shift_threshold == kNeverShift ? -1 : plan.shift_threshold}};
    for (const PlanMode& mode : plan.modes) {
      nlohmann::json points = nlohmann::json::array();
      for (const PlanPoint& p : mode.points)
        points.push_back({{"concurrency", p.concurrency},
                          {"ttft_s", p.ttft_s},
                          {"tpot_s", p.tpot_s},
                          {"throughput_tok_s", p.throughput_tok_s},
                          {"completion_s", p.completion_s},
                          {"fits", p.fits}});
      out["modes"][mode.name] = {{"tensor_parallel", mode.tensor},
                                 {"sequence_parallel", mode.sequence},
                                 {"replicas", mode.replicas},
                                 {"points", points}};
    }
    std::printf("%s\n", out.dump(2).c_str());
    return 0;
  }
  std::printf("%s on %d x %s (%s, %s weights): %.1f GB of weights; %d in / %d out per request\n", model.c_str(), gpus,
              gpu->name.c_str(), interconnect.c_str(), dtype.c_str(), plan.weight_bytes / 1e9,
              static_cast<int>(workload.prompt_tokens), static_cast<int>(workload.output_tokens));
  if (plan.shift_threshold == kNeverShift)
    std::printf("shift threshold: never (TP is predicted faster at every step size)\n");
  else
    std::printf("shift threshold: %lld scheduled tokens\n", static_cast<long long>(plan.shift_threshold));
  for (const PlanMode& mode : plan.modes) {
    std::printf("\n%-5s (TP %d x SP %d, %d replica%s)\n", mode.name.c_str(), mode.tensor, mode.sequence, mode.replicas,
                mode.replicas == 1 ? "" : "s");
    std::printf("  %11s %10s %10s %14s %13s\n", "concurrency", "ttft_ms", "tpot_ms", "output_tok/s", "completion_s");
    for (const PlanPoint& p : mode.points)
      std::printf("  %11lld %10.1f %10.2f %14.0f %13.2f%s\n", static_cast<long long>(p.concurrency), p.ttft_s * 1e3,
                  p.tpot_s * 1e3, p.throughput_tok_s, p.completion_s, p.fits ? "" : "  (does not fit)");
  }
  return 0;
}

}  // namespace floe
