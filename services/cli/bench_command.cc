// floe bench: the serving benchmark. Measures what `vllm bench serve` measures
// (TTFT, TPOT, token-weighted ITL, E2E, throughput, goodput) over gRPC against
// a router; the logic lives in services/cli/bench/, this file wires the flags.
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/cli/arg_parser.h"
#include "common/rpc/tls.h"
#include "services/cli/bench/grpc_backend.h"
#include "services/cli/bench/openai_http_backend.h"
#include "services/cli/bench/load_generator.h"
#include "services/cli/bench/metrics.h"
#include "services/cli/bench/report.h"
#include "services/cli/bench/workload.h"
#include "services/cli/bench/server_metrics.h"
#include "services/cli/commands.h"

namespace floe {
namespace {

using bench::Job;

struct Flags {
  std::string addr, workload = "random", json_path, plot_dir, sweep, compare, goodput, model, ramp_up;
  int num_requests = 100, input_len = 1024, output_len = -1, prefix_len = 0, vocab_size = 0;
  int max_concurrency = 0, warmup = 0, abort_after = 8, channels = 4;
  double request_rate = std::numeric_limits<double>::infinity(), burstiness = 1.0, range_ratio = 0;
  double ramp_start_rate = 0, ramp_end_rate = 0, timeout_s = 300, connect_timeout_s = 10;
  std::string api_key;
  TlsOptions tls;  // client side only: --tls-ca, --tls-cert, --tls-key
  uint64_t seed = 0;
  bool ignore_eos = false, no_progress = false;
  std::string metrics;
  std::string backend = "grpc", compare_backend;
};

struct Sweep {
  std::string what;  // "rate" or "concurrency"; empty: one run
  std::vector<double> values;
};

absl::StatusOr<Sweep> ParseSweep(const std::string& text) {
  Sweep sweep;
  if (text.empty()) return sweep;
  std::vector<std::string> kv = absl::StrSplit(text, absl::MaxSplits('=', 1));
  if (kv.size() != 2 || (kv[0] != "rate" && kv[0] != "concurrency")) {
    return absl::InvalidArgumentError(absl::StrCat("--sweep: \"", text, "\" is not rate=R1,R2,... or concurrency=C1,C2,..."));
  }
  sweep.what = kv[0];
  for (absl::string_view v : absl::StrSplit(kv[1], ',', absl::SkipEmpty())) {
    double x;
    if (!absl::SimpleAtod(v, &x) || x <= 0 || (sweep.what == "concurrency" && x != std::floor(x))) {
      return absl::InvalidArgumentError(absl::StrCat("--sweep: bad ", sweep.what, " value \"", v, "\""));
    }
    sweep.values.push_back(x);
  }
  if (sweep.values.empty()) return absl::InvalidArgumentError("--sweep: no values");
  return sweep;
}

absl::Status Validate(const Flags& f) {
  if (f.addr.empty()) return absl::InvalidArgumentError("--addr HOST:PORT is required");
  for (const std::string* b : {&f.backend, &f.compare_backend})
    if (!b->empty() && *b != "grpc" && *b != "openai-http")
      return absl::InvalidArgumentError(absl::StrCat("--backend/--compare-backend must be grpc or openai-http, got ", *b));
  if (f.num_requests <= 0) return absl::InvalidArgumentError(absl::StrCat("--num-requests must be > 0, got ", f.num_requests));
  if (!(f.request_rate > 0)) return absl::InvalidArgumentError("--request-rate must be > 0 (inf: all at once)");
  if (!(f.burstiness > 0)) return absl::InvalidArgumentError("--burstiness must be > 0");
  if (f.max_concurrency < 0) return absl::InvalidArgumentError("--max-concurrency must be >= 0");
  if (f.warmup < 0) return absl::InvalidArgumentError("--warmup must be >= 0");
  if (!(f.timeout_s > 0)) return absl::InvalidArgumentError("--timeout-s must be > 0");
  if (!f.ramp_up.empty()) {
    if (f.ramp_up != "linear" && f.ramp_up != "exponential") {
      return absl::InvalidArgumentError("--ramp-up must be linear or exponential");
    }
    if (f.ramp_start_rate < 0 || !(f.ramp_end_rate > 0) || (f.ramp_up == "exponential" && f.ramp_start_rate <= 0)) {
      return absl::InvalidArgumentError("--ramp-up needs --ramp-end-rate > 0 and --ramp-start-rate >= 0 (> 0 for exponential)");
    }
  }
  const bool tls = !f.tls.ca_file.empty() || !f.tls.cert_file.empty() || !f.tls.key_file.empty();
  if (tls && (f.backend == "openai-http" || f.compare_backend == "openai-http"))
    return absl::InvalidArgumentError("--tls-* apply to the grpc backend only (openai-http is plaintext here)");
  if (absl::Status s = ValidateTlsOptions(f.tls); !s.ok()) return s;
  const bool known = f.workload == "random" || absl::StartsWith(f.workload, "trace:") ||
                     absl::StartsWith(f.workload, "sessions:") || absl::StartsWith(f.workload, "arrivals:");
  if (!known) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--workload: \"", f.workload, "\" is not random, trace:FILE, sessions:FILE or arrivals:FILE"));
  }
  return absl::OkStatus();
}

bench::RandomSpec IdSpec(const Flags& f, const floe::v1::ModelInfo& info, uint64_t seed) {
  bench::RandomSpec spec;
  spec.num_requests = f.num_requests;
  spec.input_len = f.input_len;
  spec.output_len = f.output_len > 0 ? f.output_len : 128;
  spec.range_ratio = f.range_ratio;
  spec.prefix_len = f.prefix_len;
  spec.vocab_size = f.vocab_size > 0 ? f.vocab_size : info.vocab_size();
  spec.excluded_ids.assign(info.eos_token_ids().begin(), info.eos_token_ids().end());
  if (info.bos_token_id() > 0 || !info.eos_token_ids().empty()) spec.excluded_ids.push_back(info.bos_token_id());
  spec.seed = seed;
  return spec;
}

absl::StatusOr<std::vector<Job>> BuildWorkload(const Flags& f, const floe::v1::ModelInfo& info, uint64_t seed) {
  const auto file = [&](absl::string_view prefix) { return f.workload.substr(prefix.size()); };
  if (f.workload == "random") return bench::RandomWorkload(IdSpec(f, info, seed));
  if (absl::StartsWith(f.workload, "trace:")) return bench::TraceWorkload(file("trace:"), f.num_requests, f.output_len);
  if (absl::StartsWith(f.workload, "sessions:")) {
    return bench::SessionWorkload(file("sessions:"), f.num_requests, f.output_len);
  }
  return bench::ArrivalTraceWorkload(file("arrivals:"), IdSpec(f, info, seed));
}

bench::LabeledRun Measure(const std::string& label, double value, const std::vector<Job>& jobs,
                          bench::Backend& backend, const bench::LoadOptions& options, const bench::Slo& slo) {
  std::fprintf(stderr, "[bench] %s: %d requests\n", label.c_str(), bench::CountRequests(jobs));
  bench::LabeledRun run;
  run.label = label;
  run.sweep_value = value;
  run.result = bench::RunLoad(jobs, backend, options);
  run.summary = bench::Summarize(run.result.records, slo);
  if (run.result.aborted) std::fprintf(stderr, "floe bench: run aborted: %s\n", run.result.abort_reason.c_str());
  return run;
}

int Fail(const std::string& message, int code = 1) {
  std::fprintf(stderr, "floe bench: %s\n", message.c_str());
  return code;
}

}  // namespace

int RunBench(int argc, char** argv) {
  Flags f;
  ArgParser parser(
      "floe bench --addr HOST:PORT [--workload random|trace:FILE|sessions:FILE|arrivals:FILE] --num-requests N\n"
      "           [--request-rate R [--burstiness B] | --max-concurrency C] [--input-len N --output-len N]\n"
      "           [--seed S] [--ignore-eos] [--json FILE] [--plot DIR] [--sweep rate=..|concurrency=..] [--compare ADDR2]",
      "Serving benchmark with the metric definitions of `vllm bench serve`: TTFT, TPOT = (E2E-TTFT)/(tokens-1),\n"
      "ITL per token (a chunk of k tokens counts as k gaps), E2E; throughput, goodput, peak concurrency.\n"
      "Workloads: random ids below the model's vocab size; trace:FILE (JSONL prompt/output token ids);\n"
      "sessions:FILE (the same, grouped by `session`, each turn resending the history); arrivals:FILE\n"
      "(CSV/JSONL timestamp,input_len,output_len). A summary table goes to stdout, progress to stderr.");
  parser.AddString("addr", &f.addr, "router address HOST:PORT");
  parser.AddString("workload", &f.workload, "random | trace:FILE | sessions:FILE | arrivals:FILE");
  parser.AddInt("num-requests", &f.num_requests, "requests to measure (session turns count one each)");
  parser.AddDouble("request-rate", &f.request_rate, "open-loop arrivals per second (inf: all at t=0)");
  parser.AddDouble("burstiness", &f.burstiness, "gamma shape of inter-arrival times (1: Poisson, <1: burstier)");
  parser.AddInt("max-concurrency", &f.max_concurrency, "closed-loop cap on requests in flight (0: none)");
  parser.AddString("ramp-up", &f.ramp_up, "linear | exponential: rate moves from --ramp-start-rate to --ramp-end-rate");
  parser.AddDouble("ramp-start-rate", &f.ramp_start_rate, "ramp-up start rate (req/s)");
  parser.AddDouble("ramp-end-rate", &f.ramp_end_rate, "ramp-up end rate (req/s)");
  parser.AddInt("input-len", &f.input_len, "random: prompt tokens");
  parser.AddInt("output-len", &f.output_len, "output tokens (random default 128; traces: override len(output))");
  parser.AddDouble("range-ratio", &f.range_ratio, "random: lengths uniform in [len*(1-r), len*(1+r)]");
  parser.AddInt("prefix-len", &f.prefix_len, "random: shared prefix tokens before each prompt");
  parser.AddInt("vocab-size", &f.vocab_size, "random ids below this (0: the model's, from GetModelInfo)");
  parser.AddUint64("seed", &f.seed, "workload and arrival seed");
  parser.AddBool("ignore-eos", &f.ignore_eos, "generate exactly the output length");
  parser.AddInt("warmup", &f.warmup, "random requests sent (and not measured) before the run");
  parser.AddDouble("timeout-s", &f.timeout_s, "per-request deadline");
  parser.AddDouble("connect-timeout-s", &f.connect_timeout_s, "deadline of the initial GetModelInfo probe");
  parser.AddInt("abort-after-failures", &f.abort_after, "stop after this many failures in a row (0: never)");
  parser.AddInt("channels", &f.channels, "gRPC connections to spread requests over");
  parser.AddString("goodput", &f.goodput, "SLOs in ms, e.g. \"ttft:500 tpot:50 e2el:5000\"");
  parser.AddString("json", &f.json_path, "write config, summary and every request record here");
  parser.AddString("plot", &f.plot_dir, "write latency CDF (and sweep throughput-latency) PNGs here (gnuplot)");
  parser.AddString("sweep", &f.sweep, "rate=1,2,4 or concurrency=1,4,16: one run per value");
  parser.AddString("compare", &f.compare, "second router HOST:PORT: same seeded workload, ratios side by side");
  parser.AddString("backend", &f.backend,
                   "grpc (floe.v1 Generate) or openai-http (POST /v1/completions, streamed; --addr is the HTTP port)");
  parser.AddString("compare-backend", &f.compare_backend,
                   "backend of --compare (default: --backend), e.g. HTTP against gRPC on one router");
  parser.AddString("model", &f.model, "model name (default: the served one)");
  parser.AddString("api-key", &f.api_key, "API key, sent as \"authorization: Bearer KEY\" (routers with --api-key-file)");
  parser.AddString("tls-ca", &f.tls.ca_file, "CA (PEM) that verifies the router's certificate: TLS (grpc backend)");
  parser.AddString("tls-cert", &f.tls.cert_file, "client certificate (PEM), for routers that require one (mTLS)");
  parser.AddString("tls-key", &f.tls.key_file, "private key (PEM) of --tls-cert");
  parser.AddBool("no-progress", &f.no_progress, "no live progress line");
  parser.AddString("metrics", &f.metrics, "comma-separated /metrics URLs (floe local prints them): before/after "
                                          "snapshots give prefix hit rate and speculative acceptance for the run "
                                          "(https:// ones scraped with the --tls-* files)");
  if (absl::Status s = parser.Parse(argc, argv); !s.ok()) return Fail(std::string(s.message()), 2);
  if (parser.help_requested()) return std::printf("%s", parser.Help().c_str()), 0;
  if (!parser.positional().empty()) return Fail(absl::StrCat("unexpected argument \"", parser.positional()[0], "\""), 2);
  if (absl::Status s = Validate(f); !s.ok()) return Fail(absl::StrCat(s.message(), " (see --help)"), 2);
  auto sweep = ParseSweep(f.sweep);
  if (!sweep.ok()) return Fail(std::string(sweep.status().message()), 2);
  bench::Slo slo;
  if (!f.goodput.empty()) {
    auto parsed = bench::ParseSlo(f.goodput);
    if (!parsed.ok()) return Fail(std::string(parsed.status().message()), 2);
    slo = *parsed;
  }

  nlohmann::json out = {{"config",
                         {{"addr", f.addr}, {"workload", f.workload}, {"num_requests", f.num_requests},
                          {"request_rate", std::isinf(f.request_rate) ? nlohmann::json("inf") : nlohmann::json(f.request_rate)},
                          {"burstiness", f.burstiness}, {"max_concurrency", f.max_concurrency},
                          {"input_len", f.input_len}, {"output_len", f.output_len}, {"range_ratio", f.range_ratio},
                          {"prefix_len", f.prefix_len}, {"seed", f.seed}, {"ignore_eos", f.ignore_eos},
                          {"warmup", f.warmup}, {"timeout_s", f.timeout_s}, {"goodput", f.goodput},
                          {"sweep", f.sweep}, {"compare", f.compare}, {"ramp_up", f.ramp_up},
                          {"backend", f.backend}, {"compare_backend", f.compare_backend.empty() ? f.backend : f.compare_backend}}}};
  auto write_json = [&]() -> bool {
    if (f.json_path.empty()) return true;
    std::ofstream file(f.json_path);
    file << out.dump(1) << "\n";
    if (!file) std::fprintf(stderr, "floe bench: cannot write --json %s\n", f.json_path.c_str());
    return static_cast<bool>(file);
  };

  auto credentials = MakeChannelCredentials(f.tls);  // plaintext without --tls-*
  if (!credentials.ok()) return Fail(std::string(credentials.status().message()));
  auto make_backend = [&](const std::string& addr, const std::string& kind) -> std::unique_ptr<bench::Backend> {
    if (kind == "openai-http")
      return std::make_unique<bench::OpenAiHttpBackend>(
          bench::OpenAiHttpBackendOptions{addr, f.ignore_eos, f.timeout_s, f.model, f.api_key});
    return std::make_unique<bench::GrpcBackend>(
        bench::GrpcBackendOptions{addr, f.ignore_eos, f.timeout_s, f.model, f.channels, *credentials, f.api_key});
  };
  std::vector<std::unique_ptr<bench::Backend>> backends;
  backends.push_back(make_backend(f.addr, f.backend));
  if (!f.compare.empty())
    backends.push_back(make_backend(f.compare, f.compare_backend.empty() ? f.backend : f.compare_backend));
  floe::v1::ModelInfo info;
  for (size_t b = 0; b < backends.size(); ++b) {
    auto probed = backends[b]->GetModelInfo(f.connect_timeout_s);
    if (probed.ok()) {
      if (b == 0) info = *probed;
      continue;
    }
    const std::string message = absl::StrCat("server unreachable: ", probed.status().ToString());
    if (f.vocab_size <= 0) {
      out["error"] = message;
      out["summary"] = bench::SummaryJson(bench::Summary());
      out["requests"] = nlohmann::json::array();
      write_json();
      return Fail(absl::StrCat(message, " (nothing sent; --vocab-size skips this check)"));
    }
    std::fprintf(stderr, "floe bench: warning: %s; going on with --vocab-size %d\n", message.c_str(), f.vocab_size);
  }
  out["model"] = {{"name", info.name()}, {"vocab_size", info.vocab_size()}, {"max_context", info.max_context()}};

  bench::LoadOptions base;
  base.request_rate = f.request_rate;
  base.burstiness = f.burstiness;
  base.max_concurrency = f.max_concurrency;
  base.ramp_up = f.ramp_up;
  base.ramp_start_rate = f.ramp_start_rate;
  base.ramp_end_rate = f.ramp_end_rate;
  base.seed = f.seed;
  base.abort_after_consecutive_failures = f.abort_after;
  base.progress = !f.no_progress;

  if (f.warmup > 0) {
    Flags warm = f;
    warm.num_requests = f.warmup;
    auto jobs = bench::RandomWorkload(IdSpec(warm, info, f.seed + 0x5eed));
    if (!jobs.ok()) return Fail(std::string(jobs.status().message()), 2);
    bench::LoadOptions options = base;
    options.request_rate = std::numeric_limits<double>::infinity();
    options.max_concurrency = f.max_concurrency > 0 ? f.max_concurrency : f.warmup;
    for (auto& backend : backends) {
      bench::RunResult warm_result = bench::RunLoad(*jobs, *backend, options);
      if (warm_result.aborted) std::fprintf(stderr, "floe bench: warm-up aborted: %s\n", warm_result.abort_reason.c_str());
    }
  }

  std::vector<std::string> metrics_urls;
  for (absl::string_view url : absl::StrSplit(f.metrics, ',', absl::SkipEmpty())) metrics_urls.emplace_back(url);
  const HttpGetOptions scrape{.ca_file = f.tls.ca_file, .cert_file = f.tls.cert_file, .key_file = f.tls.key_file};
  const std::vector<double> points = sweep->values.empty() ? std::vector<double>{0} : sweep->values;
  std::vector<bench::LabeledRun> runs, compared;
  bool aborted = false;
  for (size_t p = 0; p < points.size() && !aborted; ++p) {
    bench::LoadOptions options = base;
    std::string label = f.addr;
    if (sweep->what == "rate") options.request_rate = points[p];
    if (sweep->what == "concurrency") options.max_concurrency = static_cast<int>(points[p]);
    if (!sweep->what.empty()) label = absl::StrCat(sweep->what, "=", points[p]);
    // Each sweep point gets fresh prompts, so later points do not hit the
    // prefix cache the earlier ones filled; compared servers get the same ones.
    auto jobs = BuildWorkload(f, info, f.seed + p);
    if (!jobs.ok()) return Fail(std::string(jobs.status().message()), 2);
    const bench::MetricsSnapshot before = bench::ScrapeSettled(metrics_urls, scrape);
    runs.push_back(Measure(label, points[p], *jobs, *backends[0], options, slo));
    if (!metrics_urls.empty()) {
      nlohmann::json server = bench::ServerDelta(before, bench::ScrapeSettled(metrics_urls, scrape));
      std::printf("[bench] server (%s): prefix hit rate %s, spec acceptance %s, mean accepted length %s, preemptions %g\n",
                  label.c_str(), server["prefix_hit_rate"].dump().c_str(), server["spec_acceptance_rate"].dump().c_str(),
                  server["spec_mean_accepted_length"].dump().c_str(), server["preemptions"].get<double>());
      out["server_metrics"].push_back(server);
    }
    aborted = runs.back().result.aborted;
    if (backends.size() > 1 && !aborted) {
      std::string other = sweep->what.empty() ? f.compare : absl::StrCat(label, " @", f.compare);
      compared.push_back(Measure(other, points[p], *jobs, *backends[1], options, slo));
      aborted = compared.back().result.aborted;
    }
  }

  for (size_t i = 0; i < runs.size(); ++i) {
    std::printf("%s", bench::SummaryTable(runs[i]).c_str());
    if (i < compared.size()) std::printf("%s", bench::CompareTable(runs[i], compared[i]).c_str());
  }
  if (runs.size() > 1) std::printf("%s", bench::SweepTable(runs).c_str());

  const nlohmann::json first = bench::RunJson(runs.front());
  out["summary"] = first["summary"];
  out["requests"] = first["requests"];
  out["aborted"] = aborted;
  if (aborted) out["error"] = absl::StrCat("aborted: ", (compared.size() == runs.size() && compared.back().result.aborted
                                                              ? compared.back() : runs.back()).result.abort_reason);
  if (runs.size() > 1) {
    out["runs"] = nlohmann::json::array();
    for (const auto& run : runs) out["runs"].push_back(bench::RunJson(run));
  }
  if (!compared.empty()) {
    out["compare"] = nlohmann::json::array();
    for (const auto& run : compared) out["compare"].push_back(bench::RunJson(run));
  }
  bool ok = write_json();
  if (!f.plot_dir.empty()) {
    std::vector<bench::LabeledRun> all = runs;
    all.insert(all.end(), compared.begin(), compared.end());
    if (absl::Status s = bench::WritePlots(f.plot_dir, sweep->what.empty() ? all : runs, !sweep->what.empty());
        !s.ok()) {
      std::fprintf(stderr, "floe bench: %s\n", std::string(s.message()).c_str());
      ok = false;
    } else {
      std::fprintf(stderr, "[bench] plots in %s\n", f.plot_dir.c_str());
    }
  }
  if (aborted) return Fail("run ended early; the result holds the requests sent so far");
  if (runs.front().summary.completed == 0) return Fail("no request completed");
  return ok ? 0 : 1;
}

}  // namespace floe
