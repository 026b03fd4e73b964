// bench_service: latency of one batched Step (appends + speculate for --batch
// requests) over loopback against an in-process floe.v1.SuffixCache server,
// while --background-threads other clients append in the same namespace, each
// at --background-rate Steps per second (8 requests x 4 tokens a Step; 0:
// back to back). The global tree is first warmed with --warm-responses trace
// responses. --repeats runs of --iters timed Steps; prints one JSON object
// with each run's p50/p99 and their medians (microseconds), the server-side
// handler time (so transport = total - server), a same-run baseline (the
// same entries with no tokens and no drafts, under the same load), and the
// whole setup.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <thread>
#include <ctime>

#include <grpcpp/grpcpp.h>
#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "common/cli/arg_parser.h"
#include "common/rpc/server_runner.h"
#include "services/suffix_cache/replay/trace.h"
#include "services/suffix_cache/suffix_cache_service.h"

namespace floe::suffix_cache {
namespace {

using Clock = std::chrono::steady_clock;
using Stub = floe::v1::SuffixCache::Stub;

std::unique_ptr<Stub> NewStub(const std::string& address) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);  // one connection per client
  return floe::v1::SuffixCache::NewStub(
      grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args));
}

bool Start(Stub* stub, const std::string& id, const std::vector<int32_t>& prompt) {
  floe::v1::SuffixStartRequest req;
  req.set_request_id(id);
  req.mutable_prompt()->Add(prompt.begin(), prompt.end());
  floe::v1::SuffixStartResponse resp;
  grpc::ClientContext ctx;
  return stub->StartRequest(&ctx, req, &resp).ok();
}
void End(Stub* stub, const std::string& id) {
  floe::v1::SuffixEndRequest req;
  req.set_request_id(id);
  floe::v1::SuffixEndResponse resp;
  grpc::ClientContext ctx;
  stub->EndRequest(&ctx, req, &resp);
}

// A request replayed from a trace entry: emits `chunk` true tokens a step.
struct Replayed {
  std::string id;
  const TraceRequest* t = nullptr;
  size_t pos = 0;
};

int Run(int argc, char** argv) {
  std::string trace_path = "/work/shared/traces/dev-agentic.jsonl";
  int iters = 2000, batch = 64, background = 4, warm = 200, chunk = 2, max_prompt = 4096, repeats = 3;
  double background_rate = 100;
  ArgParser parser("bench_service [options]", "Batched Step latency of the suffix-cache service over loopback.");
  parser.AddString("trace", &trace_path, "JSONL trace (prompt/output token ids)");
  parser.AddInt("iters", &iters, "timed Step calls");
  parser.AddInt("batch", &batch, "requests per Step");
  parser.AddInt("background-threads", &background, "clients appending concurrently");
  parser.AddInt("warm-responses", &warm, "trace responses cached before timing");
  parser.AddInt("chunk", &chunk, "tokens appended per request per step");
  parser.AddInt("max-prompt", &max_prompt, "prompt tokens kept per request");
  parser.AddInt("repeats", &repeats, "timed runs of --iters Steps (medians reported)");
  parser.AddDouble("background-rate", &background_rate, "Steps per second per background client (0: back to back)");
  bool direct = false;
  int step_threads = std::min(15, std::max(0, static_cast<int>(std::thread::hardware_concurrency()) - 1));
  parser.AddInt("step-threads", &step_threads, "StoreOptions::step_threads");
  bool async_appends = false;
  parser.AddBool("async-global-appends", &async_appends, "StoreOptions::async_global_appends");
  parser.AddBool("direct", &direct, "call the service in-process (no gRPC): the compute part of a Step");
  if (absl::Status s = parser.Parse(argc, argv); !s.ok() || parser.help_requested()) {
    std::fprintf(stderr, "%s", parser.Help().c_str());
    return s.ok() ? 0 : 2;
  }
  // Step holds up to --batch request locks at once; absl's debug-mode
  // deadlock graph would dominate the call.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  auto trace = LoadTrace(trace_path);
  if (!trace.ok() || trace->empty()) {
    std::fprintf(stderr, "bench_service: %s\n", std::string(trace.status().message()).c_str());
    return 1;
  }
  for (TraceRequest& t : *trace) {
    if (static_cast<int>(t.prompt.size()) > max_prompt) t.prompt.erase(t.prompt.begin(), t.prompt.end() - max_prompt);
  }
  StoreOptions store_options;
  store_options.step_threads = step_threads;
  store_options.async_global_appends = async_appends;
  SuffixCacheStore store(store_options);
  ServiceLimits limits;
  limits.max_batch = std::max(batch, 256);
  SuffixCacheService service(&store, limits);
  auto runner = ServerRunner::Start({"127.0.0.1:0"}, {&service});
  if (!runner.ok()) return 1;
  service.SetAccepting(true);
  (*runner)->SetServing(true);
  const std::string address = (*runner)->address();
  auto stub = NewStub(address);

  // Warm the global tree with cached responses.
  const size_t n = trace->size();
  for (int i = 0; i < warm; ++i) {
    const TraceRequest& t = (*trace)[i % n];
    const std::string id = absl::StrCat("warm-", i);
    Start(stub.get(), id, t.prompt);
    floe::v1::SuffixStepRequest req;
    auto* e = req.add_entries();
    e->set_request_id(id);
    e->mutable_appended()->Add(t.output.begin(), t.output.end());
    floe::v1::SuffixStepResponse resp;
    grpc::ClientContext ctx;
    stub->Step(&ctx, req, &resp);
    End(stub.get(), id);
  }

  std::atomic<bool> stop{false};
  std::atomic<int64_t> background_steps{0};
  std::vector<std::thread> threads;
  for (int b = 0; b < background; ++b) {
    threads.emplace_back([&, b] {
      auto my = NewStub(address);
      int serial = 0;
      std::vector<Replayed> reqs(8);
      auto restart = [&](Replayed& r) {
        if (!r.id.empty()) End(my.get(), r.id);
        r.id = absl::StrCat("bg-", b, "-", serial);
        r.t = &(*trace)[(warm + 97 * b + serial++) % n];
        r.pos = 0;
        Start(my.get(), r.id, r.t->prompt);
      };
      for (Replayed& r : reqs) restart(r);
      const auto period = std::chrono::duration_cast<Clock::duration>(
          std::chrono::duration<double>(background_rate > 0 ? 1.0 / background_rate : 0.0));
      auto next = Clock::now();
      while (!stop.load()) {
        if (background_rate > 0) {
          next += period;
          std::this_thread::sleep_until(next);
        }
        floe::v1::SuffixStepRequest req;
        for (Replayed& r : reqs) {
          if (r.pos + 4 > r.t->output.size()) restart(r);
          auto* e = req.add_entries();
          e->set_request_id(r.id);
          e->set_response_offset(static_cast<int64_t>(r.pos));
          e->mutable_appended()->Add(r.t->output.begin() + r.pos, r.t->output.begin() + r.pos + 4);
          r.pos += 4;
        }
        floe::v1::SuffixStepResponse resp;
        grpc::ClientContext ctx;
        my->Step(&ctx, req, &resp);
        background_steps.fetch_add(1);
      }
    });
  }

  std::vector<Replayed> reqs(batch);
  int serial = 0;
  auto restart = [&](Replayed& r) {
    if (!r.id.empty()) End(stub.get(), r.id);
    r.id = absl::StrCat("fg-", serial);
    r.t = &(*trace)[(serial++ * 7) % n];
    r.pos = 0;
    Start(stub.get(), r.id, r.t->prompt);
  };
  for (Replayed& r : reqs) restart(r);
  // Server side: the store's two phases (StepTimings) of each foreground
  // Step (the background clients' Steps have other batch sizes).
  std::mutex phases_mu;
  std::vector<double> local_us, global_us;  // guarded by phases_mu
  bool record_phases = false;                   // guarded by phases_mu
  service.SetStepObserver([&](const StepTimings& t) {
    std::lock_guard<std::mutex> l(phases_mu);
    if (!record_phases || t.entries != batch) return;
    local_us.push_back(t.appends_local_drafts_seconds * 1e6);
    global_us.push_back(t.global_drafts_seconds * 1e6);
  });
  int64_t drafted = 0, errors = 0;
  const int warmup = std::min(100, iters / 10);
  std::vector<double> run_p50, run_p99, run_cpu;
  std::vector<double> us;  // the last run's samples
  const auto bench_start = Clock::now();
  const int64_t background_start = background_steps.load();
  for (int repeat = 0; repeat < repeats; ++repeat) {
  us.clear();
  us.reserve(iters);
  double cpu_us = 0;  // process CPU inside the timed calls
  auto cpu_now_us = [] {
    timespec t{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
  };
  for (int it = 0; it < iters + warmup; ++it) {
    for (Replayed& r : reqs) {
      if (r.pos + chunk > r.t->output.size()) restart(r);  // untimed
    }
    floe::v1::SuffixStepRequest req;
    req.mutable_params()->set_max_spec_tokens(16);
    req.mutable_params()->set_max_spec_factor(1.0f);
    req.mutable_params()->set_min_token_prob(0.1f);
    for (Replayed& r : reqs) {
      auto* e = req.add_entries();
      e->set_request_id(r.id);
      e->set_response_offset(static_cast<int64_t>(r.pos));
      e->mutable_appended()->Add(r.t->output.begin() + r.pos, r.t->output.begin() + r.pos + chunk);
      e->set_speculate(true);
      r.pos += chunk;
    }
    floe::v1::SuffixStepResponse resp;
    grpc::ClientContext ctx;
    {
      std::lock_guard<std::mutex> l(phases_mu);
      record_phases = it >= warmup;
    }
    const double c0 = cpu_now_us();
    const auto t0 = Clock::now();
    grpc::Status s = direct ? service.Step(nullptr, &req, &resp) : stub->Step(&ctx, req, &resp);
    const double elapsed = std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
    if (!s.ok()) ++errors;
    for (const auto& d : resp.results()) {
      drafted += d.token_ids_size();
      errors += d.code() != 0;
    }
    if (it >= warmup) {
      us.push_back(elapsed);
      cpu_us += cpu_now_us() - c0;
    }
  }
  std::vector<double> sorted = us;
  std::sort(sorted.begin(), sorted.end());
  run_p50.push_back(sorted[sorted.size() / 2]);
  run_p99.push_back(sorted[std::min(sorted.size() - 1, static_cast<size_t>(0.99 * sorted.size()))]);
  run_cpu.push_back(cpu_us / us.size());
  }
  const double bench_seconds = std::chrono::duration<double>(Clock::now() - bench_start).count();
  // The same-run baseline: the same 64 entries with nothing to append and no
  // draft asked, under the same background load: what a Step costs before
  // any tree work (gRPC, the service's checks, the store's lookups and locks).
  std::vector<double> empty_us;
  for (int it = 0; it < iters; ++it) {
    floe::v1::SuffixStepRequest req;
    for (const Replayed& r : reqs) {
      auto* e = req.add_entries();
      e->set_request_id(r.id);
      e->set_response_offset(static_cast<int64_t>(r.pos));
    }
    floe::v1::SuffixStepResponse resp;
    grpc::ClientContext ctx;
    const auto t0 = Clock::now();
    grpc::Status s = direct ? service.Step(nullptr, &req, &resp) : stub->Step(&ctx, req, &resp);
    empty_us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
    if (!s.ok()) ++errors;
  }
  std::sort(empty_us.begin(), empty_us.end());
  const int64_t background_during = background_steps.load() - background_start;
  stop.store(true);
  for (auto& t : threads) t.join();
  std::vector<double> server_local, server_global;
  {
    std::lock_guard<std::mutex> l(phases_mu);
    server_local = local_us;
    server_global = global_us;
  }
  // process_cpu_us_per_step: CPU of the whole process during the timed calls;
  // with --background-threads 0 it is what one Step costs (client + server),
  // however long a loaded machine's scheduler made it wait.
  std::sort(us.begin(), us.end());
  auto pct = [&](double p) { return us[std::min(us.size() - 1, static_cast<size_t>(p * us.size()))]; };
  double mean = 0;
  for (double v : us) mean += v;
  mean /= us.size();
  StoreStats stats = store.Stats();
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  int64_t context_tokens = 0;
  for (const Replayed& r : reqs) context_tokens += static_cast<int64_t>(r.t->prompt.size() + r.pos);
  nlohmann::json out = {
      {"bench", direct ? "suffix_cache_step_in_process" : "suffix_cache_step_loopback"},
      {"setup",
       {{"batch", batch},
        {"tokens_appended_per_request", chunk},
        {"speculate", "every request, path drafts"},
        {"draft_params", {{"max_spec_tokens", 16}, {"max_spec_factor", 1.0}, {"min_token_prob", 0.1}}},
        {"max_depth", store_options.max_depth},
        {"prompt_tokens_kept", max_prompt},
        {"mean_request_context_tokens_at_end", static_cast<double>(context_tokens) / reqs.size()},
        {"warm_responses", warm},
        {"background_threads", background},
        {"background_step", "8 requests x 4 tokens appended, no speculate"},
        {"background_rate_target_per_client", background_rate},
        {"background_rate_measured_per_client",
         background > 0 ? background_during / bench_seconds / background : 0.0},
        {"step_threads", step_threads},
        {"async_global_appends", async_appends},
        {"repeats", repeats},
        {"iterations_per_repeat", iters},
        {"hardware_threads", static_cast<int>(std::thread::hardware_concurrency())}}},
      {"p50_us_median", median(run_p50)},
      {"p99_us_median", median(run_p99)},
      {"p50_us_runs", run_p50},
      {"p99_us_runs", run_p99},
      {"last_run", {{"p50_us", pct(0.50)}, {"p90_us", pct(0.90)}, {"p99_us", pct(0.99)}, {"max_us", us.back()},
                    {"mean_us", mean}}},
      {"process_cpu_us_per_step_median", median(run_cpu)},
      {"empty_step_baseline", {{"what", "the same entries, no tokens, no drafts, same load"},
                               {"p50_us", empty_us[empty_us.size() / 2]},
                               {"p99_us", empty_us[std::min(empty_us.size() - 1,
                                                            static_cast<size_t>(0.99 * empty_us.size()))]}}},
      {"p50_over_empty_step", median(run_p50) / std::max(1.0, empty_us[empty_us.size() / 2])},
      // The store's own time inside the timed Steps (no gRPC, no queueing),
      // over all repeats.
      {"server_appends_local_drafts_us_p50", server_local.empty() ? 0.0 : median(server_local)},
      {"server_global_drafts_us_p50", server_global.empty() ? 0.0 : median(server_global)},
      {"draft_tokens_per_step", static_cast<double>(drafted) / ((iters + warmup) * repeats)},
      {"errors", errors},
      {"cached_responses", stats.cached},
      {"cached_tokens", stats.cached_tokens},
      {"target_p50_us", 300},
      {"target_p99_us", 2000},
  };
  std::printf("%s\n", out.dump(2).c_str());
  (*runner)->Shutdown(std::chrono::milliseconds(100));
  return 0;
}

}  // namespace
}  // namespace floe::suffix_cache

int main(int argc, char** argv) { return floe::suffix_cache::Run(argc, argv); }
