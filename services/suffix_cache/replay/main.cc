// floe-suffix-replay: replays a trace through the suffix speculator (or the
// n-gram baseline) as /work/shared/reference/suffix-replay.md defines, and
// prints the acceptance, latency and memory figures.
#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "services/suffix_cache/replay/replay.h"

namespace floe::suffix_cache {
namespace {

constexpr char kUsage[] = R"(usage: floe-suffix-replay --trace FILE.jsonl [options]

Replays a trace through Suffix Decoding (one request at a time, as in
suffix-replay.md) and prints acceptance, latency and memory figures.

  --trace FILE               JSON Lines trace (fields prompt, output; id, session)
  --preset NAME              arctic (default) | vllm | arctic-spec32
  --reference-compatible     exactly the reference's drafts (drafts stop at the
                             tree's depth); default: drafts continue past it
  --max-depth N              tree depth (arctic 64, vllm 24)
  --max-spec-tokens N        draft budget (arctic 16, vllm 24, arctic-spec32 32)
  --max-spec-factor F        budget per matched token (1.0)
  --max-spec-offset F        budget offset (0.0)
  --min-token-prob P         stop drafting below this path probability (0.13;
                             0.1 with --reference-compatible)
  --max-cached-requests N    global tree size in responses; -1 unlimited, 0 off
  --eviction fifo|usage      which cached response goes first over the budget
                             (fifo; usage: responses whose drafts were accepted
                             get a second chance; see eviction_policy.h)
  --confident-prob P         (default mode) past the match-length budget, keep
                             drafting while the path probability is >= P (0.99;
                             0 turns it off) ...
  --confident-min-match N    ... from matches of >= N tokens (max-spec-tokens/3)
  --confident-min-acceptance A  ... for requests whose recent acceptance rate is
                             >= A (0.5; 0: any; see draft_feedback.h)
  --confident-min-support K  (default mode) past the match-length budget, keep
                             drafting from the local tree while the path is
                             unanimous and >= K occurrences back it (3; 0 off)
  --score-exponent G         (default mode) a drafted token adds prob^G to the
                             score that picks the draft (1.5; 1: prob)
  --tree-spec                tree drafts (best-first) instead of path drafts
  --ngram                    n-gram prompt-lookup baseline (n=3, k=10) instead
  --server HOST:PORT         replay against a running floe-suffix-cache (one
                             Step RPC per step: the previous step's tokens and
                             the draft) instead of in process; it must run
                             with this replay's --max-depth,
                             --max-cached-requests (its --max-cached-responses)
                             and --eviction, synchronous global appends, and
                             an empty namespace (checked first)
  --server-namespace NAME    namespace of the replayed requests (replay)
  --server-deadline-ms N     deadline of each call (10000)
  --limit N                  replay only the first N requests
  --json                     print one JSON object instead of text
  --help                     this text
)";

struct Flags {
  std::string trace;
  bool json = false;
  int64_t limit = -1;
  std::string preset = "arctic";
  ReplayOptions options;
};

absl::Status ApplyPreset(const std::string& name, ReplayOptions* o) {
  o->draft.max_spec_factor = 1.0f;
  o->draft.max_spec_offset = 0.0f;
  o->draft.min_token_prob = 0.1f;
  if (name == "arctic") {
    o->speculator = {.max_depth = 64, .max_cached_requests = 100000};
    o->draft.max_spec_tokens = 16;
  } else if (name == "vllm") {
    o->speculator = {.max_depth = 24, .max_cached_requests = 10000};
    o->draft.max_spec_tokens = 24;
  } else if (name == "arctic-spec32") {
    o->speculator = {.max_depth = 64, .max_cached_requests = 100000};
    o->draft.max_spec_tokens = 32;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("--preset: unknown preset '", name, "' (arctic, vllm, arctic-spec32)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<Flags> ParseFlags(int argc, char** argv) {
  Flags f;
  // The preset and the mode apply first, so explicit flags override them
  // wherever they are.
  bool reference_compatible = false;
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--preset" && i + 1 < argc) f.preset = argv[i + 1];
    if (std::string(argv[i]) == "--reference-compatible") reference_compatible = true;
  }
  if (absl::Status st = ApplyPreset(f.preset, &f.options); !st.ok()) return st;
  if (!reference_compatible) ApplyDefaultMode(&f.options.draft);
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> absl::StatusOr<std::string> {
      if (i + 1 >= argc) return absl::InvalidArgumentError(absl::StrCat(arg, ": missing value"));
      return std::string(argv[++i]);
    };
    auto int_value = [&](int64_t lo, int64_t hi) -> absl::StatusOr<int64_t> {
      absl::StatusOr<std::string> v = value();
      if (!v.ok()) return v.status();
      int64_t x;
      if (!absl::SimpleAtoi(*v, &x) || x < lo || x > hi) {
        return absl::InvalidArgumentError(
            absl::StrCat(arg, ": '", *v, "' is not an integer in [", lo, ", ", hi, "]"));
      }
      return x;
    };
    auto float_value = [&](float lo, float hi) -> absl::StatusOr<float> {
      absl::StatusOr<std::string> v = value();
      if (!v.ok()) return v.status();
      float x;
      if (!absl::SimpleAtof(*v, &x) || !(x >= lo && x <= hi)) {
        return absl::InvalidArgumentError(
            absl::StrCat(arg, ": '", *v, "' is not a number in [", lo, ", ", hi, "]"));
      }
      return x;
    };
#define FLOE_FLAG_VALUE(var, expr)              \
  {                                             \
    auto v_ = (expr);                           \
    if (!v_.ok()) return v_.status();           \
    var = *v_;                                  \
  }
    if (arg == "--help" || arg == "-h") {
      return absl::CancelledError("help");
    } else if (arg == "--trace") {
      FLOE_FLAG_VALUE(f.trace, value());
    } else if (arg == "--preset") {
      ++i;  // applied above
    } else if (arg == "--reference-compatible") {
      // applied above
    } else if (arg == "--max-depth") {
      FLOE_FLAG_VALUE(f.options.speculator.max_depth, int_value(1, 4096));
    } else if (arg == "--max-spec-tokens") {
      FLOE_FLAG_VALUE(f.options.draft.max_spec_tokens, int_value(0, 4096));
    } else if (arg == "--max-spec-factor") {
      FLOE_FLAG_VALUE(f.options.draft.max_spec_factor, float_value(0.0f, 1e6f));
    } else if (arg == "--max-spec-offset") {
      FLOE_FLAG_VALUE(f.options.draft.max_spec_offset, float_value(-1e6f, 1e6f));
    } else if (arg == "--min-token-prob") {
      FLOE_FLAG_VALUE(f.options.draft.min_token_prob, float_value(0.0f, 1.0f));
    } else if (arg == "--max-cached-requests") {
      FLOE_FLAG_VALUE(f.options.speculator.max_cached_requests, int_value(-1, 0x7FFFFFFF));
    } else if (arg == "--eviction") {
      std::string name;
      FLOE_FLAG_VALUE(name, value());
      FLOE_FLAG_VALUE(f.options.speculator.eviction, ParseEvictionKind(name));
    } else if (arg == "--confident-prob") {
      FLOE_FLAG_VALUE(f.options.draft.confident_prob, float_value(0.0f, 1.0f));
    } else if (arg == "--confident-min-acceptance") {
      FLOE_FLAG_VALUE(f.options.draft.confident_min_acceptance, float_value(0.0f, 1.0f));
    } else if (arg == "--confident-min-support") {
      FLOE_FLAG_VALUE(f.options.draft.confident_min_support, int_value(0, 1 << 30));
    } else if (arg == "--score-exponent") {
      FLOE_FLAG_VALUE(f.options.draft.score_exponent, float_value(0.01f, 100.0f));
    } else if (arg == "--confident-min-match") {
      FLOE_FLAG_VALUE(f.options.draft.confident_min_match, int_value(0, 4096));
    } else if (arg == "--tree-spec") {
      f.options.draft.use_tree_spec = true;
    } else if (arg == "--ngram") {
      f.options.ngram = true;
    } else if (arg == "--server") {
      FLOE_FLAG_VALUE(f.options.server, value());
    } else if (arg == "--server-namespace") {
      FLOE_FLAG_VALUE(f.options.server_namespace, value());
    } else if (arg == "--server-deadline-ms") {
      FLOE_FLAG_VALUE(f.options.server_deadline_ms, int_value(1, 3600 * 1000));
    } else if (arg == "--limit") {
      FLOE_FLAG_VALUE(f.limit, int_value(0, int64_t{1} << 40));
    } else if (arg == "--json") {
      f.json = true;
    } else {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag '", arg, "' (see --help)"));
    }
#undef FLOE_FLAG_VALUE
  }
  if (f.trace.empty()) return absl::InvalidArgumentError("--trace FILE is required (see --help)");
  if (!f.options.server.empty() && f.options.ngram) {
    return absl::InvalidArgumentError("--server and --ngram exclude each other: the baseline has no service");
  }
  return f;
}

double Percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  const size_t k = std::min(v.size() - 1, static_cast<size_t>(q * (v.size() - 1) + 0.5));
  std::nth_element(v.begin(), v.begin() + k, v.end());
  return v[k];
}

nlohmann::json ToJson(const Flags& f, const ReplayResult& r) {
  const ReplayOptions& o = f.options;
  const double steps = std::max<double>(1, r.steps);
  double mean = 0;
  for (double x : r.speculate_us) mean += x;
  mean /= std::max<size_t>(1, r.speculate_us.size());
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  nlohmann::json j;
  j["trace"] = f.trace;
  j["speculator"] = o.ngram ? "ngram" : "suffix";
  if (o.ngram) {
    j["config"] = {{"n", o.ngram_n}, {"k", o.ngram_k}};
  } else {
    j["config"] = {{"preset", f.preset},
                   {"reference_compatible", !o.draft.extend_past_depth},
                   {"max_depth", o.speculator.max_depth},
                   {"max_spec_tokens", o.draft.max_spec_tokens},
                   {"max_spec_factor", o.draft.max_spec_factor},
                   {"max_spec_offset", o.draft.max_spec_offset},
                   {"min_token_prob", o.draft.min_token_prob},
                   {"max_cached_requests", o.speculator.max_cached_requests},
                   {"eviction", EvictionKindName(o.speculator.eviction)},
                   {"tree_spec", o.draft.use_tree_spec},
                   {"confident_prob", o.draft.confident_prob},
                   {"discount_own_suffix", o.draft.discount_own_suffix},
                   {"confident_min_acceptance", o.draft.confident_min_acceptance},
                   {"confident_min_support", o.draft.confident_min_support},
                   {"score_exponent", o.draft.score_exponent}};
  }
  j["requests"] = r.requests;
  j["prompt_tokens"] = r.prompt_tokens;
  j["output_tokens"] = r.output_tokens;
  j["steps"] = r.steps;
  j["accepted_tokens"] = r.accepted_tokens;
  j["drafted_tokens"] = r.drafted_tokens;
  j["tokens_per_step"] = r.output_tokens / steps;
  j["accepted_per_step"] = r.accepted_tokens / steps;
  j["drafted_per_step"] = r.drafted_tokens / steps;
  j["acceptance_rate"] =
      r.drafted_tokens ? static_cast<double>(r.accepted_tokens) / r.drafted_tokens : 0.0;
  j["empty_draft_share"] = r.empty_draft_steps / steps;
  const bool remote = !o.server.empty();
  if (remote) {
    j["server"] = o.server;
    j["server_namespace"] = o.server_namespace;
    // Appends travel inside the next step's Step call.
    j["timing"] = "speculate_* are whole Step round trips (the previous step's tokens + the draft)";
  }
  j["speculate_p50_us"] = Percentile(r.speculate_us, 0.50);
  j["speculate_p99_us"] = Percentile(r.speculate_us, 0.99);
  j["speculate_mean_us"] = mean;
  j["append_us_per_token"] =
      remote ? nlohmann::json() : nlohmann::json(r.append_us / std::max<int64_t>(1, r.output_tokens));
  j["start_us_per_prompt_token"] = r.start_us / std::max<int64_t>(1, r.prompt_tokens);
  // StartRequest is the prompt's indexing (the local tree) plus bookkeeping.
  j["prompt_index_us_per_token"] = j["start_us_per_prompt_token"];
  j["evictions"] = r.evictions;
  j["stop_us_per_request"] = r.stop_us / std::max<int64_t>(1, r.requests);
  j["cached_tokens"] = r.cached_tokens;
  j["global_tree_bytes"] = r.global_tree_bytes;
  j["bytes_per_cached_token"] =
      r.cached_tokens ? static_cast<double>(r.global_tree_bytes) / r.cached_tokens : 0.0;
  j["peak_rss_mb"] = ru.ru_maxrss / 1024.0;  // this process (not the server)
  j["wall_s"] = r.wall_s;
  j["drafted_histogram"] = r.drafted_histogram;
  j["accepted_histogram"] = r.accepted_histogram;
  return j;
}

int Main(int argc, char** argv) {
  absl::StatusOr<Flags> flags = ParseFlags(argc, argv);
  if (!flags.ok()) {
    if (absl::IsCancelled(flags.status())) {
      std::fputs(kUsage, stdout);
      return 0;
    }
    std::fprintf(stderr, "floe-suffix-replay: %s\n", std::string(flags.status().message()).c_str());
    return 2;
  }
  absl::StatusOr<std::vector<TraceRequest>> trace = LoadTrace(flags->trace);
  if (!trace.ok()) {
    std::fprintf(stderr, "floe-suffix-replay: %s\n", trace.status().ToString().c_str());
    return 1;
  }
  if (flags->limit >= 0 && static_cast<size_t>(flags->limit) < trace->size()) {
    trace->resize(flags->limit);
  }
  absl::StatusOr<ReplayResult> result = RunReplay(*trace, flags->options);
  if (!result.ok()) {
    std::fprintf(stderr, "floe-suffix-replay: %s\n", result.status().ToString().c_str());
    return 1;
  }
  const nlohmann::json j = ToJson(*flags, *result);
  if (flags->json) {
    std::cout << j.dump() << "\n";
  } else {
    for (auto it = j.begin(); it != j.end(); ++it) {
      std::cout << it.key() << ": " << it.value().dump() << "\n";
    }
  }
  return 0;
}

}  // namespace
}  // namespace floe::suffix_cache

int main(int argc, char** argv) { return floe::suffix_cache::Main(argc, argv); }
