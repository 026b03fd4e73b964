// Speculative decoding end to end on a trace: a real `floe local` cluster
// (router, CPU worker with the built-in tiny model, floe-suffix-cache) serves
// the trace's requests over gRPC at a given concurrency.
//
// --mode forced (default): the worker runs with --benchmark-forced-decoding
// and every request carries its recorded output as forced_output_ids, so the
// verifier judges drafts against the trace exactly as the suffix replay does
// while RPCs, deadlines, batching and KV rollback run for real. Per request,
// one step = one streamed chunk (the worker sends one per engine step that
// emits tokens). The same prefix of the trace is replayed in process through
// the replay library (floe-suffix-replay with the worker's drafting mode and
// parameters) for the comparison. With --cost-curve (bench_verify_cost JSON)
// the projected speedup = tokens per step / (step time at the mean draft
// length / plain step time), at batch = concurrency.
//
// --mode own: no forced ids; the model's own greedy outputs, each request
// sent --passes times in trace order (an agent re-asking). Reports wall-clock
// time and tokens/s per pass and a hash of the outputs (identical across
// proposers: speculation is lossless). --proposer lstm|suffix+lstm with
// --speculator DIR (e.g. scripts/train_speculator.py's, trained on the same
// model's own outputs) measures the model-based speculator the same way.
// Every pass reports, per proposer, drafts and acceptance per draft position.
//
// JSON on stdout; progress on stderr.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <thread>

#include <grpcpp/grpcpp.h>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "common/cli/arg_parser.h"
#include "common/metrics/http_get.h"
#include "common/metrics/prometheus_text.h"
#include "floe/v1/router.grpc.pb.h"
#include "services/cli/subprocess.h"
#include "services/suffix_cache/replay/replay.h"
#include "services/suffix_cache/replay/trace.h"

namespace floe {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

struct Flags {
  std::string trace;
  int max_requests = 0;
  int concurrency = 1;
  std::string proposer = "suffix";
  int k = 32;
  int threshold = 0;  // 0: the worker's default
  std::string overhead;  // --speculative-step-overhead-tokens; empty: the worker's default
  std::string mode = "forced";
  int passes = 1;
  int own_max_tokens = 256;
  std::string cost_curve;
  std::string speculator;
  std::string floe;
  int timeout_s = 1800;
  bool reference_compatible = false;
  std::string model;  // empty: the built-in tiny model
  int workers = 1;
  std::string router_policy, suffix_tree, speculative_cost_curve;
  int max_prompt_tokens = 0, max_output_tokens = 0;
};

double Now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

constexpr const char* kCounters[] = {"floe_spec_decode_num_draft_tokens_total", "floe_spec_decode_num_accepted_tokens_total",
                                     "floe_spec_decode_num_drafts_total", "floe_generation_tokens_total",
                                     "floe_num_preemptions_total"};

// Every worker's samples, summed per name and label set; kCounters' totals
// under their bare names.
std::map<std::string, double> Scrape(const std::vector<std::string>& urls) {
  std::map<std::string, double> out;
  for (const std::string& url : urls) {
    auto body = HttpGet(url);
    if (!body.ok()) {
      std::fprintf(stderr, "cannot scrape %s: %s\n", url.c_str(), std::string(body.status().message()).c_str());
      continue;
    }
    auto samples = ParsePrometheusText(*body);
    for (const char* name : kCounters) out[name] += SumByName(samples, name);
    for (const auto& [key, value] : samples)
      if (key.find('{') != std::string::npos) out[key] += value;
  }
  return out;
}

// Per proposer: drafts, draft and accepted tokens over the pass, and the
// acceptance rate of each draft position (accepted at j / drafts).
json ProposerFigures(const std::map<std::string, double>& before, const std::map<std::string, double>& after,
                     const std::string& proposer, int k) {
  auto delta = [&](const std::string& name, std::vector<std::string> labels) {
    labels.push_back(absl::StrCat("proposer=\"", proposer, "\""));
    const double a = SumByLabels(after, name, labels), b = SumByLabels(before, name, labels);
    return std::isnan(a) ? 0.0 : a - (std::isnan(b) ? 0.0 : b);
  };
  const double drafts = delta("floe_spec_decode_num_drafts_total", {});
  json per_position = json::array();
  for (int j = 0; j < k; ++j) {
    const double accepted = delta("floe_spec_decode_num_accepted_tokens_per_pos_total", {absl::StrCat("position=\"", j, "\"")});
    per_position.push_back(drafts > 0 ? accepted / drafts : 0.0);
  }
  return {{"drafts", drafts},
          {"draft_tokens", delta("floe_spec_decode_num_draft_tokens_total", {})},
          {"accepted_tokens", delta("floe_spec_decode_num_accepted_tokens_total", {})},
          {"acceptance_per_position", per_position}};
}

struct PassResult {
  int64_t requests = 0, failed = 0, tokens = 0, steps = 0;
  double wall_s = 0;
  // Per request with at least 2 tokens: (last token's time - first's) /
  // (tokens - 1), the time per output token after the first.
  std::vector<double> tpot_ms;
  uint64_t output_hash = 1469598103934665603ull;  // FNV-1a over (request index, tokens) in trace order
  std::string first_error;
};

PassResult RunPass(floe::v1::Floe::Stub& stub, const std::vector<suffix_cache::TraceRequest>& trace, const Flags& f,
                   int pass) {
  PassResult result;
  std::vector<std::vector<int32_t>> outputs(trace.size());
  std::vector<int64_t> steps(trace.size(), 0);
  std::vector<double> tpot(trace.size(), -1.0);
  std::atomic<size_t> next{0};
  std::mutex mu;
  const double t0 = Now();
  auto worker = [&] {
    for (size_t i = next++; i < trace.size(); i = next++) {
      const suffix_cache::TraceRequest& t = trace[i];
      floe::v1::GenerateRequest request;
      request.set_request_id(absl::StrCat("trace-", i, "-pass", pass));
      request.set_session_id(t.session);
      request.mutable_token_ids()->mutable_ids()->Assign(t.prompt.begin(), t.prompt.end());
      request.mutable_stopping()->set_ignore_eos(true);
      if (f.mode == "forced") {
        request.mutable_stopping()->set_max_tokens(static_cast<int32_t>(t.output.size()));
        request.mutable_forced_output_ids()->Assign(t.output.begin(), t.output.end());
      } else {
        request.mutable_stopping()->set_max_tokens(
            std::min<int32_t>(f.own_max_tokens, static_cast<int32_t>(t.output.size())));
      }
      grpc::ClientContext context;
      context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(f.timeout_s));
      auto reader = stub.Generate(&context, request);
      floe::v1::GenerateResponse response;
      double first = 0, last = 0;
      size_t first_chunk_tokens = 0;
      while (reader->Read(&response)) {
        if (!response.has_chunk() || response.chunk().token_ids_size() == 0) continue;
        last = Now();
        if (steps[i] == 0) first = last, first_chunk_tokens = response.chunk().token_ids_size();
        ++steps[i];
        outputs[i].insert(outputs[i].end(), response.chunk().token_ids().begin(), response.chunk().token_ids().end());
      }
      grpc::Status status = reader->Finish();
      // The first chunk carries the prefill's token: TPOT is the time after
      // it over the tokens that came after it (none: the request has none).
      if (outputs[i].size() > first_chunk_tokens)
        tpot[i] = (last - first) * 1000.0 / static_cast<double>(outputs[i].size() - first_chunk_tokens);
      std::lock_guard<std::mutex> lock(mu);
      if (!status.ok() || (f.mode == "forced" && outputs[i] != t.output)) {
        ++result.failed;
        if (result.first_error.empty())
          result.first_error = status.ok() ? absl::StrCat("request ", i, ": output differs from the forced ids")
                                           : absl::StrCat("request ", i, ": ", status.error_message());
      }
      if ((i + 1) % 10 == 0) std::fprintf(stderr, "  pass %d: %zu/%zu requests\n", pass, i + 1, trace.size());
    }
  };
  std::vector<std::thread> threads;
  for (int c = 0; c < f.concurrency; ++c) threads.emplace_back(worker);
  for (std::thread& t : threads) t.join();
  result.wall_s = Now() - t0;
  result.requests = static_cast<int64_t>(trace.size());
  for (double t : tpot)
    if (t >= 0) result.tpot_ms.push_back(t);
  for (size_t i = 0; i < trace.size(); ++i) {
    result.tokens += static_cast<int64_t>(outputs[i].size());
    result.steps += steps[i];
    for (int32_t token : outputs[i]) {
      result.output_hash = (result.output_hash ^ static_cast<uint32_t>(token)) * 1099511628211ull;
    }
    result.output_hash = (result.output_hash ^ (0x9e3779b9u + i)) * 1099511628211ull;
  }
  return result;
}

// The q-quantile (nearest rank) of `v`; 0 for none.
double Quantile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t rank = static_cast<size_t>(std::ceil(q * static_cast<double>(v.size())));
  return v[std::clamp<size_t>(rank, 1, v.size()) - 1];
}

// Median step time (ms) at `batch` and `draft` tokens per request, linear in
// the draft length between the curve's points (the curve's largest batch
// not above `batch`).
double StepMs(const json& rows, int batch, double draft) {
  int use_batch = 0;
  for (const json& r : rows)
    if (r["batch"].get<int>() <= batch) use_batch = std::max(use_batch, r["batch"].get<int>());
  std::vector<std::pair<double, double>> points;
  for (const json& r : rows)
    if (r["batch"].get<int>() == use_batch)
      points.emplace_back(r["draft_tokens"].get<double>(), r["median_step_ms"].get<double>());
  std::sort(points.begin(), points.end());
  if (points.empty()) return 0;
  for (size_t i = 1; i < points.size(); ++i) {
    if (draft <= points[i].first || i + 1 == points.size()) {
      const auto [x0, y0] = points[i - 1];
      const auto [x1, y1] = points[i];
      return y0 + (y1 - y0) * (draft - x0) / (x1 - x0);
    }
  }
  return points[0].second;
}

json ReplayFigures(const std::vector<suffix_cache::TraceRequest>& trace, const Flags& f) {
  suffix_cache::ReplayOptions options;
  if (f.proposer == "ngram") {
    options.ngram = true;  // the replay's baseline: n = 3, k = 10 (the worker's ngram is n = 1..4, k)
  } else {
    // What the worker's SuffixProposer uses: depth 64, budget k, Floe's
    // drafting mode unless --reference-compatible.
    options.speculator = {.max_depth = 64, .max_cached_requests = 10000};
    if (!f.reference_compatible) suffix_cache::ApplyDefaultMode(&options.draft);
    options.draft.max_spec_tokens = f.k;
  }
  auto r = suffix_cache::RunReplay(trace, options);
  if (!r.ok()) return {{"error", std::string(r.status().message())}};
  const double steps = static_cast<double>(r->steps);
  return {{"parameters", f.proposer == "ngram" ? "ngram n=3 k=10"
                                               : absl::StrCat("suffix depth 64, max_spec_tokens ", f.k,
                                                              f.reference_compatible ? ", reference-compatible"
                                                                                     : ", Floe's default mode")},
          {"steps", r->steps},
          {"output_tokens", r->output_tokens},
          {"tokens_per_step", r->output_tokens / steps},
          {"drafted_per_step", r->drafted_tokens / steps},
          {"acceptance_rate", r->drafted_tokens ? 1.0 * r->accepted_tokens / r->drafted_tokens : 0.0},
          // A server emits the first token from the prefill without a draft.
          {"tokens_per_step_with_prefill_step", r->output_tokens / (steps + static_cast<double>(r->requests))}};
}

int Main(int argc, char** argv) {
  Flags f;
  ArgParser parser("bench_trace_speculation --trace FILE.jsonl [options]",
                   "Replays a trace through a real floe local cluster (tiny built-in model, CPU) with speculative\n"
                   "decoding; JSON on stdout (see the header of bench/speculation/bench_trace_speculation.cc).");
  parser.AddString("trace", &f.trace, "JSON Lines trace (prompt, output token ids; session)");
  parser.AddInt("max-requests", &f.max_requests, "use only the trace's first N requests (0: all)");
  parser.AddInt("concurrency", &f.concurrency, "requests in flight");
  parser.AddString("proposer", &f.proposer, "off|ngram|suffix|lstm|suffix+lstm");
  parser.AddString("speculator", &f.speculator, "lstm, suffix+lstm: the speculator folder (the workers' --speculator)");
  parser.AddInt("k", &f.k, "--num-speculative-tokens of the worker (and the replay's max_spec_tokens)");
  parser.AddInt("threshold", &f.threshold, "--speculative-token-threshold of the worker (0: its default)");
  parser.AddString("overhead", &f.overhead,
                   "--speculative-step-overhead-tokens of the worker (-1: cost model off; empty: its default)");
  parser.AddString("mode", &f.mode, "forced (trace outputs) | own (the model's own outputs)");
  parser.AddInt("passes", &f.passes, "send the requests this many times (own mode: an agent re-asking)");
  parser.AddInt("own-max-tokens", &f.own_max_tokens, "own mode: max_tokens per request");
  parser.AddString("cost-curve", &f.cost_curve, "bench_verify_cost JSON (step_cost rows) for the projected speedup");
  parser.AddString("model", &f.model, "checkpoint folder to serve (default: the built-in tiny model)");
  parser.AddInt("workers", &f.workers, "floe local --workers");
  parser.AddString("router-policy", &f.router_policy, "floe local --router-policy (e.g. least-outstanding)");
  parser.AddString("suffix-tree", &f.suffix_tree, "floe local --suffix-tree: shared|private");
  parser.AddString("speculative-cost-curve", &f.speculative_cost_curve,
                   "the workers' --speculative-cost-curve: auto|measure|roofline|linear|FILE (empty: their default)");
  parser.AddInt("max-prompt-tokens", &f.max_prompt_tokens,
                "keep only each prompt's last N tokens (0: whole), so a big model's grid fits the time");
  parser.AddInt("max-output-tokens", &f.max_output_tokens, "keep only each output's first N tokens (0: whole)");
  parser.AddString("floe", &f.floe, "the floe binary (default: next to this one)");
  parser.AddInt("timeout-s", &f.timeout_s, "per-request deadline");
  parser.AddBool("reference-compatible", &f.reference_compatible,
                 "suffix: the workers (and the replay) draft exactly as Arctic Inference, not in Floe's mode");
  if (auto exit_code = parser.ParseOrExitCode(argc, argv, "bench_trace_speculation")) return *exit_code;
  if (f.trace.empty() || f.concurrency < 1 || f.passes < 1 || (f.mode != "forced" && f.mode != "own") ||
      (f.proposer != "off" && f.proposer != "ngram" && f.proposer != "suffix" && f.proposer != "lstm" &&
       f.proposer != "suffix+lstm")) {
    std::fprintf(stderr, "bench_trace_speculation: bad arguments (see --help)\n");
    return 2;
  }
  auto trace = suffix_cache::LoadTrace(f.trace);
  if (!trace.ok()) return std::fprintf(stderr, "%s\n", std::string(trace.status().message()).c_str()), 1;
  if (f.max_requests > 0 && static_cast<size_t>(f.max_requests) < trace->size()) trace->resize(f.max_requests);
  for (suffix_cache::TraceRequest& t : *trace) {
    if (f.max_prompt_tokens > 0 && t.prompt.size() > static_cast<size_t>(f.max_prompt_tokens))
      t.prompt.erase(t.prompt.begin(), t.prompt.end() - f.max_prompt_tokens);
    if (f.max_output_tokens > 0 && t.output.size() > static_cast<size_t>(f.max_output_tokens))
      t.output.resize(f.max_output_tokens);
  }

  if (f.floe.empty()) f.floe = (fs::read_symlink("/proc/self/exe").parent_path() / "floe").string();
  std::vector<std::string> local = {f.floe, "local", "--speculative", f.proposer, "--num-speculative-tokens",
                                    std::to_string(f.k), "--kv-cache-gb", "2", "--workers", std::to_string(f.workers)};
  if (f.model.empty()) {
    local.insert(local.end(), {"--builtin", "tiny"});
  } else {
    local.insert(local.end(), {"--model", f.model});
  }
  if (!f.router_policy.empty()) local.insert(local.end(), {"--router-policy", f.router_policy});
  if (!f.suffix_tree.empty()) local.insert(local.end(), {"--suffix-tree", f.suffix_tree});
  if (!f.speculative_cost_curve.empty())
    local.insert(local.end(), {"--speculative-cost-curve", f.speculative_cost_curve});
  if (f.threshold > 0) local.insert(local.end(), {"--speculative-token-threshold", std::to_string(f.threshold)});
  if (!f.overhead.empty()) local.insert(local.end(), {"--speculative-step-overhead-tokens", f.overhead});
  if (f.mode == "forced") local.push_back("--benchmark-forced-decoding");
  if (f.reference_compatible) local.push_back("--speculative-reference-compatible");
  if (!f.speculator.empty()) local.insert(local.end(), {"--speculator", f.speculator});
  auto cluster = Subprocess::Spawn(local);
  if (!cluster.ok()) return std::fprintf(stderr, "%s\n", std::string(cluster.status().message()).c_str()), 1;
  auto address = (*cluster)->WaitForLine("router listening on ", std::chrono::seconds(300));
  if (!address.ok()) return std::fprintf(stderr, "floe local: %s\n", std::string(address.status().message()).c_str()), 1;
  std::vector<std::string> worker_metrics;
  for (const std::string& line : (*cluster)->lines()) {
    if (line.rfind("metrics worker", 0) == 0) worker_metrics.push_back(line.substr(line.rfind(' ') + 1));
  }
  auto stub = floe::v1::Floe::NewStub(grpc::CreateChannel(*address, grpc::InsecureChannelCredentials()));

  json passes = json::array();
  for (int pass = 0; pass < f.passes; ++pass) {
    const auto before = Scrape(worker_metrics);
    PassResult r = RunPass(*stub, *trace, f, pass);
    const auto after = Scrape(worker_metrics);
    auto delta = [&](const char* name) { return after.at(name) - before.at(name); };
    const double steps = static_cast<double>(r.steps);
    const double drafted = delta("floe_spec_decode_num_draft_tokens_total");
    const double accepted = delta("floe_spec_decode_num_accepted_tokens_total");
    json p = {{"pass", pass},
              {"requests", r.requests},
              {"failed", r.failed},
              {"output_tokens", r.tokens},
              {"steps", r.steps},
              {"tokens_per_step", r.tokens / steps},
              {"drafted_per_step", drafted / steps},
              {"accepted_per_step", accepted / steps},
              {"acceptance_rate", drafted > 0 ? accepted / drafted : 0.0},
              {"server_generated_tokens", delta("floe_generation_tokens_total")},
              {"preemptions", delta("floe_num_preemptions_total")},
              {"wall_s", r.wall_s},
              {"tokens_per_s", r.tokens / r.wall_s},
              {"tpot_ms_p50", Quantile(r.tpot_ms, 0.50)},
              {"tpot_ms_p99", Quantile(r.tpot_ms, 0.99)},
              {"output_hash", absl::StrCat(r.output_hash)}};
    if (!r.first_error.empty()) p["first_error"] = r.first_error;
    {
      // The engine thread waits for each step's batched suffix-cache Step
      // before its forward: the share of the pass spent there is what
      // overlapping it with the forward could win at most.
      auto rpc = [&](const char* name) {
        const double a = SumByLabels(after, name, {"call=\"step\""}), b = SumByLabels(before, name, {"call=\"step\""});
        return std::isnan(a) ? 0.0 : a - (std::isnan(b) ? 0.0 : b);
      };
      const double wait_s = rpc("floe_suffix_cache_client_rpc_latency_seconds_sum");
      const double calls = rpc("floe_suffix_cache_client_rpc_latency_seconds_count");
      if (calls > 0)
        p["suffix_cache_step_rpc"] = {{"calls", calls},
                                      {"seconds", wait_s},
                                      {"mean_ms", wait_s * 1000 / calls},
                                      {"share_of_wall", wait_s / r.wall_s / f.workers}};
    }
    json by_proposer = json::object();
    for (const char* name : {"ngram", "suffix", "lstm"})
      if (f.proposer.find(name) != std::string::npos) by_proposer[name] = ProposerFigures(before, after, name, f.k);
    if (!by_proposer.empty()) p["by_proposer"] = std::move(by_proposer);
    if (!f.cost_curve.empty()) {
      std::ifstream in(f.cost_curve);
      json curve = json::parse(in, nullptr, /*allow_exceptions=*/false);
      if (curve.is_discarded() || !curve.contains("step_cost")) {
        std::fprintf(stderr, "--cost-curve: no step_cost in %s\n", f.cost_curve.c_str());
        return 1;
      }
      const json& rows = curve["step_cost"]["rows"];
      // Drafts ride on decode steps only: the mean draft of a decode step.
      const double decode_steps = steps - static_cast<double>(r.requests);
      const double mean_draft = decode_steps > 0 ? drafted / decode_steps : 0.0;
      const double plain = StepMs(rows, f.concurrency, 0), verify = StepMs(rows, f.concurrency, mean_draft);
      p["projection"] = {{"curve_model", curve["step_cost"]["model"]},
                         {"batch", f.concurrency},
                         {"mean_draft_per_decode_step", mean_draft},
                         {"plain_step_ms", plain},
                         {"verify_step_ms", verify},
                         {"projected_speedup", r.tokens / steps / (verify / plain)}};
    }
    std::fprintf(stderr, "pass %d: %.3f tokens/step, %.3f drafted/step, acceptance %.3f, %.1f s\n", pass,
                 r.tokens / steps, drafted / steps, drafted > 0 ? accepted / drafted : 0.0, r.wall_s);
    passes.push_back(std::move(p));
  }
  (*cluster)->Terminate(std::chrono::seconds(30));

  json out = {{"trace", f.trace},
              {"requests", trace->size()},
              {"concurrency", f.concurrency},
              {"proposer", f.proposer},
              {"k", f.k},
              {"threshold", f.threshold},
              {"overhead", f.overhead},
              {"mode", f.mode},
              {"model", f.model.empty() ? "builtin tiny" : f.model},
              {"workers", f.workers},
              {"max_prompt_tokens", f.max_prompt_tokens},
              {"max_output_tokens", f.max_output_tokens},
              {"passes", passes}};
  if (f.mode == "forced" && f.proposer != "off") out["replay"] = ReplayFigures(*trace, f);
  std::printf("%s\n", out.dump(2).c_str());
  return 0;
}

}  // namespace
}  // namespace floe

int main(int argc, char** argv) { return floe::Main(argc, argv); }
