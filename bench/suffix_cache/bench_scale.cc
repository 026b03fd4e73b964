// bench_scale: memory and speculate latency of the suffix speculator at
// scale. For each --sizes entry (cached responses) a fresh speculator first
// caches that many responses of --tokens tokens (default 100 and 10,000 x
// 1,000: 0.1 M and 10 M cached tokens), then replays --trace on top of them
// in process, one thread, as floe-suffix-replay does (default mode, arctic
// parameter set unless --reference-compatible). The responses are windows of
// --prefill-trace's output stream at pseudo-random offsets (real text's
// repetition), or uniform random ids with --random-tokens (the worst case
// for memory: almost nothing shared). Reports per size the global tree's
// bytes per cached token and the replay's speculate p50/p99 (medians over
// --repeats), and their ratios to the first size, measured in the same run.
#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <random>
#include <thread>

#include <nlohmann/json.hpp>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "common/cli/arg_parser.h"
#include "services/suffix_cache/replay/replay.h"
#include "services/suffix_cache/replay/trace.h"

namespace floe::suffix_cache {
namespace {

double Percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  const size_t k = std::min(v.size() - 1, static_cast<size_t>(q * (v.size() - 1) + 0.5));
  std::nth_element(v.begin(), v.begin() + k, v.end());
  return v[k];
}

double Median(std::vector<double> v) { return Percentile(std::move(v), 0.5); }

int Run(int argc, char** argv) {
  std::string trace_path = "/work/shared/traces/dev-agentic.jsonl";
  std::string prefill_path = "/work/shared/traces/dev-chat.jsonl";
  std::string sizes_arg = "100,10000";
  int tokens = 1000, repeats = 3;
  bool random_tokens = false, reference_compatible = false;
  ArgParser parser("bench_scale [options]",
                   "Suffix-cache bytes per cached token and speculate latency, small vs large cache.");
  parser.AddString("trace", &trace_path, "JSONL trace replayed on top of the cache");
  parser.AddString("prefill-trace", &prefill_path,
                   "JSONL trace whose outputs the cached responses are cut from (another trace than --trace, so the cache holds no future outputs)");
  parser.AddString("sizes", &sizes_arg, "comma-separated numbers of cached responses");
  parser.AddInt("tokens", &tokens, "tokens per cached response");
  parser.AddInt("repeats", &repeats, "runs per size (fresh cache each; medians reported)");
  parser.AddBool("random-tokens", &random_tokens,
                 "uniform random token ids in [0, 32000) instead of trace text");
  parser.AddBool("reference-compatible", &reference_compatible,
                 "the reference's draft rules instead of Floe's default mode");
  if (absl::Status s = parser.Parse(argc, argv); !s.ok() || parser.help_requested()) {
    std::fprintf(stderr, "%s", parser.Help().c_str());
    return s.ok() ? 0 : 2;
  }
  std::vector<int> sizes;
  for (absl::string_view part : absl::StrSplit(sizes_arg, ',')) {
    int n;
    if (!absl::SimpleAtoi(part, &n) || n < 0) {
      std::fprintf(stderr, "bench_scale: --sizes: '%s' is not a count >= 0\n",
                   std::string(part).c_str());
      return 2;
    }
    sizes.push_back(n);
  }
  if (sizes.empty() || tokens < 1 || repeats < 1) {
    std::fprintf(stderr, "bench_scale: need --sizes, --tokens >= 1, --repeats >= 1\n");
    return 2;
  }
  auto trace = LoadTrace(trace_path);
  if (!trace.ok()) {
    std::fprintf(stderr, "bench_scale: %s\n", trace.status().ToString().c_str());
    return 1;
  }
  std::vector<int32_t> stream;
  if (!random_tokens) {
    auto source = LoadTrace(prefill_path);
    if (!source.ok()) {
      std::fprintf(stderr, "bench_scale: %s\n", source.status().ToString().c_str());
      return 1;
    }
    for (const TraceRequest& t : *source) stream.insert(stream.end(), t.output.begin(), t.output.end());
    if (stream.size() < static_cast<size_t>(tokens) + 1) {
      std::fprintf(stderr, "bench_scale: the prefill trace has only %zu output tokens\n", stream.size());
      return 1;
    }
  }

  ReplayOptions base;
  base.speculator = {.max_depth = 64, .max_cached_requests = 100000};
  base.draft.max_spec_tokens = 16;
  base.draft.max_spec_factor = 1.0f;
  base.draft.max_spec_offset = 0.0f;
  base.draft.min_token_prob = 0.1f;
  if (!reference_compatible) ApplyDefaultMode(&base.draft);

  nlohmann::json results = nlohmann::json::array();
  for (int size : sizes) {
    std::vector<double> p50, p99, mean, append, bytes, tps, prefill_us;
    int64_t cached_tokens = 0;
    for (int rep = 0; rep < repeats; ++rep) {
      ReplayOptions options = base;
      std::mt19937_64 rng(42 + rep);
      options.prefill.resize(size);
      for (auto& resp : options.prefill) {
        if (random_tokens) {
          std::uniform_int_distribution<int32_t> tok(0, 31999);
          resp.resize(tokens);
          for (int32_t& t : resp) t = tok(rng);
        } else {
          const size_t at = rng() % (stream.size() - tokens);
          resp.assign(stream.begin() + at, stream.begin() + at + tokens);
        }
      }
      absl::StatusOr<ReplayResult> r = RunReplay(*trace, options);
      if (!r.ok()) {
        std::fprintf(stderr, "bench_scale: %s\n", r.status().ToString().c_str());
        return 1;
      }
      p50.push_back(Percentile(r->speculate_us, 0.50));
      p99.push_back(Percentile(r->speculate_us, 0.99));
      double sum = 0;
      for (double x : r->speculate_us) sum += x;
      mean.push_back(r->speculate_us.empty() ? 0 : sum / r->speculate_us.size());
      append.push_back(r->append_us / std::max<int64_t>(1, r->output_tokens));
      bytes.push_back(r->cached_tokens ? static_cast<double>(r->global_tree_bytes) / r->cached_tokens
                                       : 0.0);
      tps.push_back(static_cast<double>(r->output_tokens) / std::max<int64_t>(1, r->steps));
      prefill_us.push_back(r->prefill_tokens ? 1e6 * r->prefill_s / r->prefill_tokens : 0.0);
      cached_tokens = r->cached_tokens;
    }
    results.push_back({{"cached_responses", size},
                       {"prefill_tokens", static_cast<int64_t>(size) * tokens},
                       {"cached_tokens_at_end", cached_tokens},
                       {"bytes_per_cached_token", Median(bytes)},
                       {"speculate_p50_us", Median(p50)},
                       {"speculate_p99_us", Median(p99)},
                       {"speculate_mean_us", Median(mean)},
                       {"append_us_per_token", Median(append)},
                       {"prefill_us_per_token", Median(prefill_us)},
                       {"tokens_per_step", Median(tps)},
                       {"speculate_p99_us_runs", p99}});
  }
  const nlohmann::json& first = results.front();
  for (auto& r : results) {
    auto ratio = [&](const char* key) {
      const double b = first[key].get<double>();
      return b > 0 ? r[key].get<double>() / b : 0.0;
    };
    r["bytes_per_cached_token_ratio"] = ratio("bytes_per_cached_token");
    r["speculate_p50_ratio"] = ratio("speculate_p50_us");
    r["speculate_p99_ratio"] = ratio("speculate_p99_us");
  }
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  nlohmann::json out = {
      {"bench", "suffix_cache_scale"},
      {"trace", trace_path},
      {"prefill_source", random_tokens ? std::string("uniform random ids < 32000")
                                       : prefill_path},
      {"tokens_per_response", tokens},
      {"mode", reference_compatible ? "reference-compatible" : "default"},
      {"preset", "arctic (max_depth 64, max_spec_tokens 16, 100000 cached responses)"},
      {"repeats", repeats},
      {"results", results},
      {"peak_rss_mb", ru.ru_maxrss / 1024.0},
      {"targets", {{"bytes_per_cached_token", 60}, {"speculate_p50_us", 5}, {"speculate_p99_us", 25}}},
      {"hardware_threads", static_cast<int>(std::thread::hardware_concurrency())},
  };
  std::printf("%s\n", out.dump(2).c_str());
  return 0;
}

}  // namespace
}  // namespace floe::suffix_cache

int main(int argc, char** argv) { return floe::suffix_cache::Run(argc, argv); }
