// floe-suffix-replay --server: the same trace replayed through a real
// floe.v1.SuffixCache server on loopback drafts exactly as in process (steps,
// accepted and drafted tokens, their histograms) for the reference's
// parameters and Floe's default mode, path and tree drafts; a server
// configured otherwise, unreachable, or already holding the namespace is
// refused before any request. Uses the dev traces (FLOE_TRACE_DIR, default
// /work/shared/traces), like suffix_replay_exact_test.
#include <atomic>
#include <chrono>
#include <ostream>
#include <string>
#include <thread>

#include "gtest/gtest.h"
#include "services/suffix_cache/replay/replay.h"
#include "tests/services/suffix_cache/dev_traces.h"
#include "tests/services/suffix_cache/service/test_server.h"

namespace floe::suffix_cache {
namespace {

std::vector<TraceRequest> Trace(const std::string& name, size_t limit) {
  absl::StatusOr<std::vector<TraceRequest>> t = LoadTrace(DevTracePath(name));
  EXPECT_TRUE(t.ok()) << t.status() << " (the traces live in ../shared/traces beside the checkout)";
  if (!t.ok()) return {};
  if (t->size() > limit) t->resize(limit);
  return *t;
}

ReplayOptions Options(int depth, int spec_tokens, int64_t cached, bool default_mode, bool tree) {
  ReplayOptions o;
  o.speculator = {.max_depth = depth, .max_cached_requests = cached};
  o.draft.max_spec_tokens = spec_tokens;
  o.draft.max_spec_factor = 1.0f;
  o.draft.min_token_prob = 0.1f;
  if (default_mode) ApplyDefaultMode(&o.draft);
  o.draft.use_tree_spec = tree;
  return o;
}

StoreOptions StoreFor(const ReplayOptions& o) {
  StoreOptions s;
  s.max_depth = o.speculator.max_depth;
  s.max_cached_responses = o.speculator.max_cached_requests;
  s.step_threads = 1;
  return s;
}

struct Case {
  const char* name;
  const char* trace;
  size_t requests;
  int depth;
  int spec_tokens;
  int64_t cached;
  bool default_mode;
  bool tree;
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

class ReplayServerTest : public ::testing::TestWithParam<Case> {};

TEST_P(ReplayServerTest, DraftsAsInProcess) {
  const Case& c = GetParam();
  const std::vector<TraceRequest> trace = Trace(c.trace, c.requests);
  ASSERT_FALSE(trace.empty());
  ReplayOptions o = Options(c.depth, c.spec_tokens, c.cached, c.default_mode, c.tree);
  absl::StatusOr<ReplayResult> local = RunReplay(trace, o);
  ASSERT_TRUE(local.ok()) << local.status();

  ServiceLimits limits;
  limits.max_spec_tokens = 64;
  TestServer server(StoreFor(o), limits);
  o.server = server.runner->address();
  absl::StatusOr<ReplayResult> remote = RunReplay(trace, o);
  ASSERT_TRUE(remote.ok()) << remote.status();
  EXPECT_GT(local->steps, static_cast<int64_t>(c.requests));
  EXPECT_EQ(remote->steps, local->steps);
  EXPECT_EQ(remote->accepted_tokens, local->accepted_tokens);
  EXPECT_EQ(remote->drafted_tokens, local->drafted_tokens);
  EXPECT_EQ(remote->drafted_histogram, local->drafted_histogram);
  EXPECT_EQ(remote->accepted_histogram, local->accepted_histogram);
  EXPECT_EQ(remote->cached_tokens, local->cached_tokens);
  EXPECT_EQ(remote->speculate_us.size(), static_cast<size_t>(remote->steps));
}

INSTANTIATE_TEST_SUITE_P(
    Modes, ReplayServerTest,
    ::testing::Values(Case{"agentic_arctic_reference", "dev-agentic.jsonl", 40, 64, 16, 100000, false, false},
                      Case{"agentic_arctic_default", "dev-agentic.jsonl", 40, 64, 16, 100000, true, false},
                      Case{"agentic_vllm_default", "dev-agentic.jsonl", 40, 24, 24, 10000, true, false},
                      Case{"agentic_spec32_default", "dev-agentic.jsonl", 40, 64, 32, 100000, true, false},
                      Case{"agentic_tree_reference", "dev-agentic.jsonl", 25, 64, 16, 100000, false, true},
                      // A small cache: FIFO evictions on both sides.
                      Case{"chat_arctic_default_evicting", "dev-chat.jsonl", 40, 64, 16, 10, true, false}),
    [](const ::testing::TestParamInfo<Case>& info) { return std::string(info.param.name); });

TEST(ReplayServerRefusalTest, OtherConfigurationBudgetEvictionsFailuresUnreachable) {
  const std::vector<TraceRequest> trace = Trace("dev-chat.jsonl", 3);
  ASSERT_FALSE(trace.empty());
  ReplayOptions o = Options(64, 16, 100000, true, false);
  StoreOptions store = StoreFor(o);
  store.max_depth = 24;
  {
    TestServer other(store, ServiceLimits{});
    o.server = other.runner->address();
    absl::StatusOr<ReplayResult> r = RunReplay(trace, o);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_NE(r.status().message().find("--max-depth 24 (want 64)"), std::string::npos) << r.status();
    EXPECT_EQ(other.store.Stats().active, 0);  // refused before any request
  }
  {
    TestServer server(StoreFor(o), ServiceLimits{});
    o.server = server.runner->address();
    ASSERT_TRUE(RunReplay(trace, o).ok());
    absl::StatusOr<ReplayResult> again = RunReplay(trace, o);  // the namespace now holds 3 responses
    EXPECT_EQ(again.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_NE(again.status().message().find("already holds 3 responses"), std::string::npos) << again.status();
    o.server_namespace = "another";
    EXPECT_TRUE(RunReplay(trace, o).ok());
  }
  {
    // A byte budget the trace outgrows: the service evicts by bytes, which
    // the in-process speculator never does. It still holds the active
    // request (up to 1,724 prompt tokens: ~175 KB counted in the budget);
    // the 20 responses' tree (~12k tokens) is far larger.
    StoreOptions small = StoreFor(o);
    small.max_bytes = 400000;
    TestServer server(small, ServiceLimits{});
    o.server = server.runner->address();
    o.server_namespace = "replay";
    // The binary's maintenance loop, which trims to the budget.
    std::atomic<bool> done{false};
    std::thread trim([&] {
      while (!done.load()) {
        server.store.TrimToBudget();
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
      }
    });
    absl::StatusOr<ReplayResult> r = RunReplay(Trace("dev-chat.jsonl", 20), o);
    done.store(true);
    trim.join();
    EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_NE(r.status().message().find("over its --max-bytes"), std::string::npos) << r.status();
  }
  {
    // A Step the service refuses (its --max-spec-tokens is 8): the request
    // is let go of, not left active.
    ServiceLimits limits;
    limits.max_spec_tokens = 8;
    TestServer server(StoreFor(o), limits);
    o.server = server.runner->address();
    absl::StatusOr<ReplayResult> r = RunReplay(trace, o);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << r.status();
    EXPECT_NE(r.status().message().find("max_spec_tokens is 16"), std::string::npos) << r.status();
    EXPECT_EQ(server.store.Stats().active, 0);
  }
  o.server = "127.0.0.1:1";  // nothing listens there
  o.server_deadline_ms = 300;
  absl::StatusOr<ReplayResult> r = RunReplay(trace, o);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kUnavailable) << r.status();
}

}  // namespace
}  // namespace floe::suffix_cache
