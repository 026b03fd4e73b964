// floe: the command-line client and local-cluster launcher.
#include <cstdio>
#include <cstring>
#include <string>

#include "services/cli/commands.h"

namespace {

constexpr char kUsage[] =
    "usage: floe COMMAND [options]   (floe COMMAND --help for each)\n\n"
    "commands:\n"
    "  local        run a local cluster (router + workers) in the foreground\n"
    "  generate     send one request to a router and stream the text\n"
    "  tokenize     text on stdin -> {\"ids\": [...]} with a tokenizer.json\n"
    "  detokenize   {\"ids\": [...]} on stdin -> text\n"
    "  make-model   write a Hugging Face checkpoint folder with seeded random weights\n"
    "  bench        serving benchmark against a router (TTFT, TPOT, ITL, throughput)\n"
    "  plan         predict TTFT, TPOT and throughput of DP, TP, SP and shift on N GPUs (cost model)\n";

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h") || !std::strcmp(argv[1], "help")) {
    std::printf("%s", kUsage);
    return argc < 2 ? 2 : 0;
  }
  const std::string command = argv[1];
  if (command == "local") return floe::RunLocal(argc - 1, argv + 1);
  if (command == "generate") return floe::RunGenerate(argc - 1, argv + 1);
  if (command == "tokenize") return floe::RunTokenize(argc - 1, argv + 1);
  if (command == "detokenize") return floe::RunDetokenize(argc - 1, argv + 1);
  if (command == "make-model") return floe::RunMakeModel(argc - 1, argv + 1);
  if (command == "bench") return floe::RunBench(argc - 1, argv + 1);
  if (command == "plan") return floe::RunPlan(argc - 1, argv + 1);
  std::fprintf(stderr, "floe: unknown command \"%s\"\n\n%s", command.c_str(), kUsage);
  return 2;
}
