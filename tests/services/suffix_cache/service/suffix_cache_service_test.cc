// The suffix-cache service on a real loopback server: drafts equal the
// in-process SuffixSpeculator's, namespaces are isolated, bad input gets the
// right status, memory bounds evict FIFO, snapshots survive a restart and a
// corrupt one is skipped.
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <thread>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "services/suffix_cache/client/suffix_cache_client.h"
#include "services/suffix_cache/replay/trace.h"
#include "services/suffix_cache/suffix_tree/suffix_speculator.h"
#include "tests/services/suffix_cache/dev_traces.h"
#include "tests/services/suffix_cache/service/test_server.h"

namespace floe::suffix_cache {
namespace {

using floe::v1::SuffixStepRequest;
using floe::v1::SuffixStepResponse;

grpc::Status Start(TestServer& s, const std::string& ns, const std::string& id, const std::vector<int32_t>& prompt) {
  floe::v1::SuffixStartRequest req;
  req.set_namespace_(ns);
  req.set_request_id(id);
  req.mutable_prompt()->Add(prompt.begin(), prompt.end());
  floe::v1::SuffixStartResponse resp;
  grpc::ClientContext ctx;
  return s.stub->StartRequest(&ctx, req, &resp);
}

grpc::Status End(TestServer& s, const std::string& ns, const std::string& id) {
  floe::v1::SuffixEndRequest req;
  req.set_namespace_(ns);
  req.set_request_id(id);
  floe::v1::SuffixEndResponse resp;
  grpc::ClientContext ctx;
  return s.stub->EndRequest(&ctx, req, &resp);
}

grpc::Status Abort(TestServer& s, const std::string& ns, const std::string& id) {
  floe::v1::SuffixAbortRequest req;
  req.set_namespace_(ns);
  req.set_request_id(id);
  floe::v1::SuffixAbortResponse resp;
  grpc::ClientContext ctx;
  return s.stub->AbortRequest(&ctx, req, &resp);
}

void AddEntry(SuffixStepRequest* req, const std::string& ns, const std::string& id, int64_t offset,
              const std::vector<int32_t>& appended, bool speculate) {
  auto* e = req->add_entries();
  e->set_namespace_(ns);
  e->set_request_id(id);
  e->set_response_offset(offset);
  e->mutable_appended()->Add(appended.begin(), appended.end());
  e->set_speculate(speculate);
}

grpc::Status DoStep(TestServer& s, const SuffixStepRequest& req, SuffixStepResponse* resp) {
  grpc::ClientContext ctx;
  return s.stub->Step(&ctx, req, resp);
}

void ExpectSameDraft(const Draft& want, const floe::v1::SuffixDraft& got, const std::string& where) {
  ASSERT_EQ(got.code(), 0) << where << ": " << got.error();
  ASSERT_EQ(std::vector<int32_t>(got.token_ids().begin(), got.token_ids().end()), want.token_ids) << where;
  EXPECT_EQ(std::vector<int32_t>(got.parents().begin(), got.parents().end()), want.parents) << where;
  EXPECT_EQ(std::vector<float>(got.probs().begin(), got.probs().end()), want.probs) << where;
  EXPECT_EQ(got.score(), want.score) << where;
  EXPECT_EQ(got.match_len(), want.match_len) << where;
}

// Tokens of `truth` (from `pos`) the draft tree predicts, following parents.
int Accepted(const Draft& d, const std::vector<int32_t>& truth, size_t pos) {
  int accepted = 0;
  int32_t parent = -1;
  while (pos + accepted < truth.size()) {
    int next = -1;
    for (size_t i = 0; i < d.token_ids.size(); ++i) {
      if (d.parents[i] == parent && d.token_ids[i] == truth[pos + accepted]) next = static_cast<int>(i);
    }
    if (next < 0) break;
    parent = next;
    ++accepted;
  }
  return accepted;
}

// Replays trace requests in groups of 4 running in lockstep (one Step per
// group step) against the service and, with the same operations in the same
// order, against SuffixSpeculator; every draft must match.
TEST(SuffixCacheServiceTest, DraftsEqualInProcessSpeculator) {
  auto trace = LoadTrace(DevTracePath("dev-agentic.jsonl"));
  ASSERT_TRUE(trace.ok()) << trace.status() << " (the traces live in ../shared/traces beside the checkout)";
  ASSERT_GE(trace->size(), 20u);
  constexpr int kRequests = 20, kGroup = 4;
  constexpr size_t kMaxOutput = 160;
  StoreOptions so;
  so.max_depth = 64;
  so.max_cached_responses = 8;  // evictions happen too
  so.step_threads = 2;           // the pooled path
  TestServer server(so, ServiceLimits{});
  SuffixSpeculator reference({.max_depth = 64, .max_cached_requests = 8});
  int64_t steps = 0, nonempty = 0;
  for (int g = 0; g < kRequests; g += kGroup) {
    // Path drafts, tree drafts, Floe's default mode (its options travel in
    // SpeculateParams), in turn.
    DraftParams params;
    params.max_spec_tokens = 16;
    params.use_tree_spec = (g / kGroup) % 3 == 1;
    if ((g / kGroup) % 3 == 2) ApplyDefaultMode(&params);
    struct Live {
      std::string id;
      std::vector<int32_t> truth, context, pending;
      size_t pos = 0;
      bool finishing = false, done = false;
    };
    std::vector<Live> live;
    for (int r = g; r < g + kGroup; ++r) {
      const TraceRequest& t = (*trace)[r];
      Live l;
      l.id = absl::StrCat("req-", r);
      l.truth.assign(t.output.begin(), t.output.begin() + std::min(kMaxOutput, t.output.size()));
      l.context = t.prompt;
      ASSERT_TRUE(Start(server, "", l.id, t.prompt).ok());
      ASSERT_TRUE(reference.StartRequest(l.id, t.prompt).ok());
      live.push_back(std::move(l));
    }
    while (true) {
      SuffixStepRequest req;
      *req.mutable_params() = ToSpeculateParams(params);
      std::vector<Live*> in_step;
      for (Live& l : live) {
        if (l.done) continue;
        AddEntry(&req, "", l.id, static_cast<int64_t>(l.pos - l.pending.size()), l.pending, !l.finishing);
        in_step.push_back(&l);
      }
      if (in_step.empty()) break;
      SuffixStepResponse resp;
      ASSERT_TRUE(DoStep(server, req, &resp).ok());
      ASSERT_EQ(resp.results_size(), static_cast<int>(in_step.size()));
      for (Live* l : in_step) {
        if (!l->pending.empty()) ASSERT_TRUE(reference.AppendTokens(l->id, l->pending).ok());
      }
      for (size_t k = 0; k < in_step.size(); ++k) {
        Live& l = *in_step[k];
        l.pending.clear();
        if (l.finishing) {
          ASSERT_TRUE(reference.StopRequest(l.id).ok());
          ASSERT_TRUE(End(server, "", l.id).ok());
          l.done = true;
          continue;
        }
        auto want = reference.Speculate(l.id, l.context, params);
        ASSERT_TRUE(want.ok());
        ExpectSameDraft(*want, resp.results(k), absl::StrCat(l.id, " at ", l.pos));
        if (::testing::Test::HasFatalFailure()) return;
        ++steps;
        nonempty += want->token_ids.empty() ? 0 : 1;
        const int accepted = Accepted(*want, l.truth, l.pos);
        const size_t emit = std::min(l.truth.size() - l.pos, static_cast<size_t>(accepted) + 1);
        l.pending.assign(l.truth.begin() + l.pos, l.truth.begin() + l.pos + emit);
        l.context.insert(l.context.end(), l.pending.begin(), l.pending.end());
        l.pos += emit;
        if (l.pos >= l.truth.size()) l.finishing = true;
      }
    }
  }
  EXPECT_GT(steps, 200);
  EXPECT_GT(nonempty, 50);
  floe::v1::SuffixStats stats;
  grpc::ClientContext ctx;
  ASSERT_TRUE(server.stub->GetStats(&ctx, {}, &stats).ok());
  EXPECT_EQ(stats.cached_responses(), 8);
  EXPECT_EQ(stats.active_requests(), 0);
  EXPECT_GT(stats.evictions_total(), 0);
}

// A response cached in namespace "a" drafts for "a" only.
TEST(SuffixCacheServiceTest, NamespaceIsolation) {
  TestServer server(StoreOptions{}, ServiceLimits{});
  const std::vector<int32_t> response = {50, 51, 52, 53, 54, 55, 56, 57};
  ASSERT_TRUE(Start(server, "a", "writer", {1, 2}).ok());
  SuffixStepRequest append;
  AddEntry(&append, "a", "writer", 0, response, false);
  SuffixStepResponse resp;
  ASSERT_TRUE(DoStep(server, append, &resp).ok());
  ASSERT_EQ(resp.results(0).code(), 0);
  ASSERT_TRUE(End(server, "a", "writer").ok());
  for (const std::string ns : {"a", "b", ""}) {
    ASSERT_TRUE(Start(server, ns, "reader", {9, 50, 51, 52}).ok());
    SuffixStepRequest q;
    AddEntry(&q, ns, "reader", 0, {}, true);
    SuffixStepResponse r;
    ASSERT_TRUE(DoStep(server, q, &r).ok());
    ASSERT_EQ(r.results(0).code(), 0) << r.results(0).error();
    if (ns == "a") {
      EXPECT_EQ(std::vector<int32_t>(r.results(0).token_ids().begin(), r.results(0).token_ids().end()),
                (std::vector<int32_t>{53, 54, 55}));
    } else {
      EXPECT_EQ(r.results(0).token_ids_size(), 0) << ns;
    }
  }
}

TEST(SuffixCacheServiceTest, BadInputGetsTheRightStatus) {
  ServiceLimits limits;
  limits.max_batch = 4;
  limits.vocab_size = 1000;
  limits.max_namespace_bytes = 16;
  TestServer server(StoreOptions{}, limits);
  ASSERT_TRUE(Start(server, "", "r1", {1, 2, 3}).ok());

  // Duplicate StartRequest.
  EXPECT_EQ(Start(server, "", "r1", {1}).error_code(), grpc::StatusCode::ALREADY_EXISTS);
  // Unknown request ids.
  EXPECT_EQ(End(server, "", "nope").error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(Abort(server, "", "nope").error_code(), grpc::StatusCode::NOT_FOUND);
  EXPECT_EQ(End(server, "other-ns", "r1").error_code(), grpc::StatusCode::NOT_FOUND);
  {
    SuffixStepRequest q;
    AddEntry(&q, "", "nope", 0, {5}, true);
    AddEntry(&q, "", "r1", 0, {5}, true);  // a good entry in the same batch still works
    SuffixStepResponse r;
    ASSERT_TRUE(DoStep(server, q, &r).ok());
    EXPECT_EQ(r.results(0).code(), grpc::StatusCode::NOT_FOUND);
    EXPECT_NE(r.results(0).error().find("nope"), std::string::npos);
    EXPECT_EQ(r.results(1).code(), 0);
  }
  // Out-of-order offset (r1 has 1 response token now).
  {
    SuffixStepRequest q;
    AddEntry(&q, "", "r1", 0, {6}, true);
    SuffixStepResponse r;
    ASSERT_TRUE(DoStep(server, q, &r).ok());
    EXPECT_EQ(r.results(0).code(), grpc::StatusCode::FAILED_PRECONDITION);
    EXPECT_NE(r.results(0).error().find("response_offset"), std::string::npos);
  }
  // Append to an ended request.
  ASSERT_TRUE(End(server, "", "r1").ok());
  {
    SuffixStepRequest q;
    AddEntry(&q, "", "r1", 1, {6}, true);
    SuffixStepResponse r;
    ASSERT_TRUE(DoStep(server, q, &r).ok());
    EXPECT_EQ(r.results(0).code(), grpc::StatusCode::FAILED_PRECONDITION);
    EXPECT_NE(r.results(0).error().find("ended"), std::string::npos);
  }
  ASSERT_TRUE(Start(server, "", "r2", {1}).ok());
  auto expect_invalid = [&](const SuffixStepRequest& q, const std::string& needle) {
    SuffixStepResponse r;
    grpc::Status s = DoStep(server, q, &r);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << needle;
    EXPECT_NE(s.error_message().find(needle), std::string::npos) << s.error_message();
  };
  expect_invalid(SuffixStepRequest{}, "entries is empty");
  {
    SuffixStepRequest q;
    for (int i = 0; i < 5; ++i) AddEntry(&q, "", absl::StrCat("x", i), 0, {}, true);
    expect_invalid(q, "--max-batch is 4");
  }
  {
    SuffixStepRequest q;
    AddEntry(&q, "", "r2", 0, {5, 1000}, true);
    expect_invalid(q, "entries[0].appended[1] = 1000");
  }
  {
    SuffixStepRequest q;
    AddEntry(&q, "", "r2", 0, {-3}, true);
    expect_invalid(q, "entries[0].appended[0] = -3");
  }
  {
    SuffixStepRequest q;
    AddEntry(&q, std::string(17, 'n'), "r2", 0, {}, true);
    expect_invalid(q, "namespace is 17 bytes; the limit is 16");
  }
  {
    SuffixStepRequest q;
    AddEntry(&q, "", "r2", 0, {}, true);
    AddEntry(&q, "default", "r2", 0, {}, true);
    expect_invalid(q, "appears twice");
  }
  {
    SuffixStepRequest q;
    AddEntry(&q, "", "r2", 0, {}, true);
    q.mutable_params()->set_max_spec_tokens(0);
    expect_invalid(q, "max_spec_tokens is 0");
  }
  // Budget terms and Floe's drafting options, each out of its range.
  const std::vector<std::pair<std::function<void(floe::v1::SpeculateParams*)>, std::string>> bad_options = {
      {[](floe::v1::SpeculateParams* p) { p->set_max_spec_offset(std::numeric_limits<float>::infinity()); },
       "entries[0].params.max_spec_offset is inf; it must be in [-1e6, 1e6]"},
      {[](floe::v1::SpeculateParams* p) { p->set_max_spec_factor(1e30f); }, "entries[0].params.max_spec_factor is 1e+30"},
      {[](floe::v1::SpeculateParams* p) { p->set_max_spec_factor(std::nanf("")); },
       "entries[0].params.max_spec_factor is nan"},
      {[](floe::v1::SpeculateParams* p) { p->set_confident_prob(1.5f); }, "entries[0].params.confident_prob is 1.5"},
      {[](floe::v1::SpeculateParams* p) { p->set_confident_min_acceptance(-0.5f); },
       "entries[0].params.confident_min_acceptance is -0.5"},
      {[](floe::v1::SpeculateParams* p) { p->set_confident_min_support(-1); },
       "entries[0].params.confident_min_support is -1"},
      {[](floe::v1::SpeculateParams* p) { p->set_confident_min_match(-2); },
       "entries[0].params.confident_min_match is -2"},
      {[](floe::v1::SpeculateParams* p) { p->set_score_exponent(0.0f); },
       "entries[0].params.score_exponent is 0; it must be in [0.01, 100]"},
  };
  for (const auto& [set, needle] : bad_options) {
    SuffixStepRequest q;
    AddEntry(&q, "", "r2", 0, {}, true);
    floe::v1::SpeculateParams* p = q.mutable_entries(0)->mutable_params();
    p->set_max_spec_tokens(8);
    set(p);
    expect_invalid(q, needle);
  }
  grpc::Status s = Start(server, "", "r3", {1, -1});
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(s.error_message().find("prompt[1] = -1"), std::string::npos) << s.error_message();
  EXPECT_EQ(Start(server, std::string(17, 'n'), "r3", {1}).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(Start(server, "", "", {1}).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  // Nothing bad was applied: r2 still at offset 0.
  SuffixStepRequest q;
  AddEntry(&q, "", "r2", 0, {7}, true);
  SuffixStepResponse r;
  ASSERT_TRUE(DoStep(server, q, &r).ok());
  EXPECT_EQ(r.results(0).code(), 0) << r.results(0).error();
}

TEST(SuffixCacheServiceTest, OverloadAndNotServing) {
  ServiceLimits limits;
  limits.max_concurrent_calls = 0;  // every call is one too many
  TestServer server(StoreOptions{}, limits);
  grpc::Status s = Start(server, "", "r", {1});
  EXPECT_EQ(s.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(s.error_message().find("--max-concurrent-calls is 0"), std::string::npos);

  TestServer other(StoreOptions{}, ServiceLimits{});
  other.service.SetAccepting(false);
  EXPECT_EQ(Start(other, "", "r", {1}).error_code(), grpc::StatusCode::UNAVAILABLE);
  other.service.SetAccepting(true);
  EXPECT_TRUE(Start(other, "", "r", {1}).ok());
}

void CacheResponse(TestServer& server, const std::string& ns, const std::string& id,
                   const std::vector<int32_t>& tokens) {
  ASSERT_TRUE(Start(server, ns, id, {1}).ok());
  SuffixStepRequest q;
  AddEntry(&q, ns, id, 0, tokens, false);
  SuffixStepResponse r;
  ASSERT_TRUE(DoStep(server, q, &r).ok());
  ASSERT_EQ(r.results(0).code(), 0);
  ASSERT_TRUE(End(server, ns, id).ok());
}

TEST(SuffixCacheServiceTest, MemoryBoundsEvictOldestFirst) {
  StoreOptions so;
  so.max_cached_responses = 3;
  TestServer server(so, ServiceLimits{});
  for (int i = 0; i < 5; ++i) CacheResponse(server, "", absl::StrCat("c", i), {100 + i, 200 + i, 300 + i});
  StoreStats stats = server.store.Stats();
  EXPECT_EQ(stats.cached, 3);
  SnapshotData snap = server.store.ExportSnapshot();
  ASSERT_EQ(snap.namespaces.size(), 1u);
  ASSERT_EQ(snap.namespaces[0].responses.size(), 3u);
  EXPECT_EQ(snap.namespaces[0].responses[0].request_id, "c2");  // c0, c1 went first

  // Byte budget across namespaces: oldest ended responses go, whatever the
  // namespace, until they fit beside the active request, which stays.
  StoreOptions tight;
  tight.max_bytes = 8192;  // one small active request (~2 KB), no 200-token response (~15 KB)
  TestServer small(tight, ServiceLimits{});
  std::vector<int32_t> old_tokens, new_tokens;
  for (int i = 0; i < 200; ++i) old_tokens.push_back(1000 + i), new_tokens.push_back(2000 + i);
  CacheResponse(small, "x", "old", old_tokens);
  CacheResponse(small, "y", "new", new_tokens);
  ASSERT_TRUE(Start(small, "y", "running", {1}).ok());
  EXPECT_EQ(small.store.TrimToBudget(), 2);
  EXPECT_EQ(small.store.Stats().cached, 1);  // the active request stays
  EXPECT_LE(small.store.Stats().bytes + small.store.Stats().active_bytes, tight.max_bytes);
  StoreOptions roomy;
  TestServer big(roomy, ServiceLimits{});
  CacheResponse(big, "x", "old", {1, 2, 3, 4});
  EXPECT_EQ(big.store.TrimToBudget(), 0);
  EXPECT_GT(big.store.Stats().bytes, 0);
}

std::vector<int32_t> ProbeDrafts(TestServer& server, const std::string& id) {
  std::vector<int32_t> out;
  EXPECT_TRUE(Start(server, "t", id, {7, 7, 100, 101}).ok());
  SuffixStepRequest q;
  AddEntry(&q, "t", id, 0, {}, true);
  q.mutable_params()->set_max_spec_tokens(8);
  q.mutable_params()->set_max_spec_factor(4);
  q.mutable_params()->set_min_token_prob(0.0f);
  SuffixStepResponse r;
  EXPECT_TRUE(DoStep(server, q, &r).ok());
  out.assign(r.results(0).token_ids().begin(), r.results(0).token_ids().end());
  out.push_back(static_cast<int32_t>(r.results(0).score() * 1000));
  EXPECT_TRUE(Abort(server, "t", id).ok());
  return out;
}

TEST(SuffixCacheServiceTest, SnapshotRestartGivesSameDrafts) {
  const std::string dir = ::testing::TempDir() + "/suffix_snap_restart";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  ServiceLimits limits;
  limits.snapshot_path = dir + "/suffix-cache.snap";
  std::vector<int32_t> before;
  {
    TestServer server(StoreOptions{}, limits);
    for (int i = 0; i < 6; ++i) {
      CacheResponse(server, "t", absl::StrCat("c", i), {100, 101, 102 + i % 2, 103, 104, 105 + i});
    }
    CacheResponse(server, "u", "other", {100, 101, 999});
    before = ProbeDrafts(server, "probe");
    floe::v1::SuffixSnapshotResponse snap;
    grpc::ClientContext ctx;
    ASSERT_TRUE(server.stub->Snapshot(&ctx, {}, &snap).ok());
    EXPECT_EQ(snap.responses(), 7);
    EXPECT_EQ(snap.path(), limits.snapshot_path);
  }
  ASSERT_GT(before.size(), 2u);
  TestServer restarted(StoreOptions{}, limits, /*restore=*/true);
  EXPECT_EQ(restarted.restored, 7);
  EXPECT_EQ(ProbeDrafts(restarted, "probe"), before);
  EXPECT_EQ(restarted.store.Stats().cached, 7);
}

TEST(SuffixCacheServiceTest, CorruptSnapshotIsSkipped) {
  const std::string dir = ::testing::TempDir() + "/suffix_snap_corrupt";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  ServiceLimits limits;
  limits.snapshot_path = dir + "/suffix-cache.snap";
  {
    TestServer server(StoreOptions{}, limits);
    CacheResponse(server, "t", "c", {1, 2, 3, 4, 5});
    ASSERT_TRUE(server.service.WriteSnapshot().ok());
  }
  const auto size = std::filesystem::file_size(limits.snapshot_path);
  std::filesystem::resize_file(limits.snapshot_path, size - 3);  // truncated
  {
    TestServer server(StoreOptions{}, limits, /*restore=*/true);
    EXPECT_EQ(server.restored, 0);
    EXPECT_TRUE(std::filesystem::exists(limits.snapshot_path + ".corrupt"));
    EXPECT_TRUE(Start(server, "t", "fresh", {1}).ok());  // serving, empty
    EXPECT_EQ(server.store.Stats().cached, 1);
  }
  std::ofstream(limits.snapshot_path) << "not a snapshot at all";
  TestServer server(StoreOptions{}, limits, /*restore=*/true);
  EXPECT_EQ(server.restored, 0);
}

// Async global appends: a Step only queues them; EndRequest flushes, so the
// ended response drafts for the next request at once.
TEST(SuffixCacheServiceTest, AsyncGlobalAppendsReachTheTreeByEnd) {
  StoreOptions so;
  so.async_global_appends = true;
  so.step_threads = 2;
  TestServer server(so, ServiceLimits{});
  ASSERT_TRUE(Start(server, "", "writer", {1, 2}).ok());
  const std::vector<int32_t> response = {50, 51, 52, 53, 54, 55, 56, 57};
  for (int k = 0; k < 4; ++k) {
    SuffixStepRequest q;
    AddEntry(&q, "", "writer", 2 * k, {response[2 * k], response[2 * k + 1]}, true);
    SuffixStepResponse r;
    ASSERT_TRUE(DoStep(server, q, &r).ok());
    ASSERT_EQ(r.results(0).code(), 0) << r.results(0).error();
  }
  ASSERT_TRUE(End(server, "", "writer").ok());
  EXPECT_EQ(server.store.Stats().cached_tokens, 8);
  ASSERT_TRUE(Start(server, "", "reader", {9, 50, 51, 52}).ok());
  SuffixStepRequest q;
  AddEntry(&q, "", "reader", 0, {}, true);
  SuffixStepResponse r;
  ASSERT_TRUE(DoStep(server, q, &r).ok());
  EXPECT_EQ(std::vector<int32_t>(r.results(0).token_ids().begin(), r.results(0).token_ids().end()),
            (std::vector<int32_t>{53, 54, 55}));
  // Abort flushes too and drops the response; a re-start gets a clean slate.
  ASSERT_TRUE(Abort(server, "", "reader").ok());
  ASSERT_TRUE(Start(server, "", "reader", {9}).ok());
  EXPECT_EQ(server.store.Stats().cached_tokens, 8);
}

// Many callers on one namespace at once: no deadlock, consistent counts.
class ConcurrentTest : public ::testing::TestWithParam<bool> {};
INSTANTIATE_TEST_SUITE_P(SyncAndAsyncAppends, ConcurrentTest, ::testing::Bool());

TEST_P(ConcurrentTest, ConcurrentCallersOnOneNamespace) {
  StoreOptions so;
  so.max_cached_responses = 16;
  so.step_threads = 2;
  so.async_global_appends = GetParam();
  SuffixCacheStore store(so);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&store, t] {
      for (int i = 0; i < 40; ++i) {
        const std::string id = absl::StrCat("t", t, "-", i);
        ASSERT_TRUE(store.StartRequest("shared", id, {1, 2, 3, t}).ok());
        int64_t offset = 0;
        for (int k = 0; k < 5; ++k) {
          std::vector<int32_t> toks = {10 + k, 20 + (i % 3), 30 + k};
          StepItem item{"shared", id, offset, toks, true, DraftParams{}};
          auto out = store.Step({item});
          ASSERT_TRUE(out[0].status.ok()) << out[0].status;
          offset += 3;
        }
        if (i % 5 == 0) {
          ASSERT_TRUE(store.AbortRequest("shared", id).ok());
        } else {
          ASSERT_TRUE(store.EndRequest("shared", id).ok());
        }
      }
    });
  }
  threads.emplace_back([&store] {
    for (int i = 0; i < 20; ++i) {
      store.TrimToBudget();
      store.ExportSnapshot();
      store.Stats();
    }
  });
  for (auto& th : threads) th.join();
  StoreStats stats = store.Stats();
  EXPECT_EQ(stats.active, 0);
  EXPECT_EQ(stats.cached, 16);
}

}  // namespace
}  // namespace floe::suffix_cache
