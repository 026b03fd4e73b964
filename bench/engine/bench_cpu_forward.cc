// CPU backend throughput on dummy (seeded random bf16) weights in real model
// shapes: prefill tokens/s (one 512-token prompt), aggregate decode tokens/s at
// batch 1/4/16 (128-token prompts, then 128 decode steps), and the tiny
// model's batch-1 decode. Medians over repetitions after a warm-up; each
// repetition is preceded by a memory-bandwidth canary (2-thread read of a 1 GiB
// buffer), since the machine is shared and noisy. JSON on stdout.
//
// Usage: bench_cpu_forward [--threads N] [--reps N] [--steps N] [--only NAME]
//   NAME: prefill | decode1 | decode4 | decode16 | tiny
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "services/worker/backend/cpu_backend.h"
#include "services/worker/model/checkpoint_writer.h"
#include "bench/engine/dummy_model.h"

namespace floe {
namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : (v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]));
}

// GB/s of `threads` threads summing disjoint halves of a 1 GiB buffer.
double BandwidthCanary(int threads) {
  static std::vector<uint64_t> buf = [] {
    std::vector<uint64_t> b((1ull << 30) / 8);
    for (size_t i = 0; i < b.size(); i += 512) b[i] = i;
    return b;
  }();
  std::vector<uint64_t> sums(threads);
  const double t0 = Now();
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      const size_t begin = buf.size() * t / threads, end = buf.size() * (t + 1) / threads;
      uint64_t a = 0, b = 0, c = 0, d = 0;
      for (size_t i = begin; i + 4 <= end; i += 4) {
        a += buf[i];
        b += buf[i + 1];
        c += buf[i + 2];
        d += buf[i + 3];
      }
      sums[t] = a + b + c + d;
    });
  }
  for (auto& th : pool) th.join();
  const double dt = Now() - t0;
  if (sums[0] == 42) std::fprintf(stderr, " ");
  return (1ull << 30) / dt / 1e9;
}

struct Options {
  int threads = 2;
  int reps = 3;
  int steps = 128;
  std::string only;
};

// Runs `batch` sequences: prefill `prompt_len` tokens each (one Forward), then
// `steps` decode steps; returns {prefill tok/s, decode tok/s (aggregate)}.
std::pair<double, double> RunOnce(Backend& backend, int batch, int prompt_len, int steps,
                                  int block_size, int blocks_per_seq) {
  const int vocab = backend.config().vocab_size;
  std::vector<std::vector<int32_t>> tables(batch), prompts(batch);
  std::vector<int32_t> next(batch);
  for (int s = 0; s < batch; ++s) {
    for (int b = 0; b < blocks_per_seq; ++b) tables[s].push_back(s * blocks_per_seq + b);
    for (int i = 0; i < prompt_len; ++i) prompts[s].push_back((s * 7919 + i * 131) % vocab);
  }
  std::vector<float> logits(static_cast<size_t>(batch) * vocab);
  std::vector<ForwardSequence> fwd(batch);
  for (int s = 0; s < batch; ++s) fwd[s] = {prompts[s], 0, tables[s], 1};
  double t0 = Now();
  absl::Status st = backend.Forward(fwd, logits.data());
  const double prefill = static_cast<double>(batch) * prompt_len / (Now() - t0);
  if (!st.ok()) {
    std::fprintf(stderr, "%s\n", st.ToString().c_str());
    std::exit(1);
  }
  t0 = Now();
  for (int step = 0; step < steps; ++step) {
    for (int s = 0; s < batch; ++s) {
      next[s] = static_cast<int32_t>(std::max_element(logits.begin() + s * vocab,
                                                      logits.begin() + (s + 1) * vocab) -
                                     (logits.begin() + s * vocab));
      fwd[s] = {{&next[s], 1}, prompt_len + step, tables[s], 1};
    }
    st = backend.Forward(fwd, logits.data());
    if (!st.ok()) {
      std::fprintf(stderr, "%s\n", st.ToString().c_str());
      std::exit(1);
    }
  }
  const double decode = static_cast<double>(batch) * steps / (Now() - t0);
  return {prefill, decode};
}

struct Result {
  std::string name;
  std::vector<double> rates, canaries;
};

std::string Json(const std::vector<Result>& results, const Options& opt, double load) {
  std::string out = absl::StrCat("{\n  \"threads\": ", opt.threads, ",\n  \"reps\": ", opt.reps,
                                 ",\n  \"decode_steps\": ", opt.steps,
                                 ",\n  \"loadavg_1m_at_start\": ", load, ",\n  \"results\": [\n");
  for (size_t i = 0; i < results.size(); ++i) {
    const Result& r = results[i];
    absl::StrAppend(&out, "    {\"name\": \"", r.name, "\", \"median_tok_s\": ", Median(r.rates),
                    ", \"median_canary_gb_s\": ", Median(r.canaries), ", \"samples_tok_s\": [");
    for (size_t j = 0; j < r.rates.size(); ++j) absl::StrAppend(&out, j ? ", " : "", r.rates[j]);
    absl::StrAppend(&out, "], \"canary_gb_s\": [");
    for (size_t j = 0; j < r.canaries.size(); ++j) absl::StrAppend(&out, j ? ", " : "", r.canaries[j]);
    absl::StrAppend(&out, "]}", i + 1 < results.size() ? ",\n" : "\n");
  }
  absl::StrAppend(&out, "  ]\n}\n");
  return out;
}

int Main(int argc, char** argv) {
  Options opt;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--threads") opt.threads = std::atoi(argv[i + 1]);
    else if (flag == "--reps") opt.reps = std::atoi(argv[i + 1]);
    else if (flag == "--steps") opt.steps = std::atoi(argv[i + 1]);
    else if (flag == "--only") opt.only = argv[i + 1];
    else {
      std::fprintf(stderr, "unknown flag %s\n", flag.c_str());
      return 2;
    }
  }
  double load = 0;
  if (FILE* f = std::fopen("/proc/loadavg", "r")) {
    if (std::fscanf(f, "%lf", &load) != 1) load = -1;
    std::fclose(f);
  }
  std::vector<Result> results;
  const int block_size = 16;
  auto want = [&](const std::string& name) { return opt.only.empty() || opt.only == name; };

  struct Case { std::string name; int batch, prompt, steps; };
  std::vector<Case> big_cases;
  if (want("prefill")) big_cases.push_back({"llama-3.2-1b prefill 512 (tok/s)", 1, 512, 0});
  for (int b : {1, 4, 16}) {
    if (want(absl::StrCat("decode", b))) {
      big_cases.push_back({absl::StrCat("llama-3.2-1b decode batch ", b, " (aggregate tok/s)"), b, 128, opt.steps});
    }
  }
  auto run_cases = [&](const std::string& preset, const std::vector<Case>& cases) {
    if (cases.empty()) return;
    const double t0 = Now();
    auto model = BuildModel(preset);
    if (!model) std::exit(1);
    auto backend = CpuBackend::Create(model->config, model->weights, {.num_threads = opt.threads});
    if (!backend.ok()) {
      std::fprintf(stderr, "%s\n", backend.status().ToString().c_str());
      std::exit(1);
    }
    std::fprintf(stderr, "%s: built and packed in %.1f s\n", preset.c_str(), Now() - t0);
    const int blocks_per_seq = (512 + opt.steps + block_size) / block_size + 1;
    if (!(*backend)->AllocateKvCache(16 * blocks_per_seq, block_size).ok()) std::exit(1);
    for (const Case& c : cases) {
      Result r{c.name, {}, {}};
      RunOnce(**backend, c.batch, c.prompt, std::min(c.steps, 8), block_size, blocks_per_seq);  // warm-up
      for (int rep = 0; rep < opt.reps; ++rep) {
        r.canaries.push_back(BandwidthCanary(opt.threads));
        auto [prefill, decode] = RunOnce(**backend, c.batch, c.prompt, c.steps, block_size, blocks_per_seq);
        r.rates.push_back(c.steps == 0 ? prefill : decode);
        std::fprintf(stderr, "  %s: %.2f tok/s (canary %.1f GB/s)\n", c.name.c_str(), r.rates.back(),
                     r.canaries.back());
      }
      results.push_back(r);
    }
  };
  run_cases("llama-3.2-1b", big_cases);
  if (want("tiny")) run_cases("tiny", {{"tiny decode batch 1 (tok/s)", 1, 128, opt.steps}});
  std::fputs(Json(results, opt, load).c_str(), stdout);
  return 0;
}

}  // namespace
}  // namespace floe

int main(int argc, char** argv) { return floe::Main(argc, argv); }
