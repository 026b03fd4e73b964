// The memory bound and leases through the gRPC service (a real loopback
// server with the binary's lease reaper): a StartRequest over --max-bytes is
// answered RESOURCE_EXHAUSTED naming the budget while the requests running
// are still served; an idle request expires (its bytes released), one that
// keeps stepping does not, and a Step naming an expired request answers
// NOT_FOUND saying so, the status a worker's client treats as "stop asking".
// Waits are deadline-bounded waits on a condition; the lease's own clock is
// injected where a test needs time to pass exactly.
#include <atomic>
#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "tests/services/suffix_cache/service/test_server.h"

namespace floe::suffix_cache {
namespace {

using floe::v1::SuffixStepRequest;
using floe::v1::SuffixStepResponse;
using std::chrono::milliseconds;

constexpr int kNotFound = 5;  // google.rpc.Code

std::vector<int32_t> Tokens(int32_t first, int n) {
  std::vector<int32_t> t(n);
  for (int i = 0; i < n; ++i) t[i] = first + i;
  return t;
}

grpc::Status Start(TestServer& s, const std::string& id, const std::vector<int32_t>& prompt) {
  floe::v1::SuffixStartRequest req;
  req.set_request_id(id);
  req.mutable_prompt()->Add(prompt.begin(), prompt.end());
  floe::v1::SuffixStartResponse resp;
  grpc::ClientContext ctx;
  return s.stub->StartRequest(&ctx, req, &resp);
}

grpc::Status End(TestServer& s, const std::string& id) {
  floe::v1::SuffixEndRequest req;
  req.set_request_id(id);
  floe::v1::SuffixEndResponse resp;
  grpc::ClientContext ctx;
  return s.stub->EndRequest(&ctx, req, &resp);
}

// One entry's result of a one-entry Step (the call itself must succeed).
floe::v1::SuffixDraft StepOne(TestServer& s, const std::string& id, int64_t offset,
                              const std::vector<int32_t>& appended) {
  SuffixStepRequest req;
  auto* e = req.add_entries();
  e->set_request_id(id);
  e->set_response_offset(offset);
  e->mutable_appended()->Add(appended.begin(), appended.end());
  e->set_speculate(true);
  SuffixStepResponse resp;
  grpc::ClientContext ctx;
  const grpc::Status st = s.stub->Step(&ctx, req, &resp);
  EXPECT_TRUE(st.ok()) << st.error_message();
  return resp.results_size() == 1 ? resp.results(0) : floe::v1::SuffixDraft();
}

// Polls `done` until it holds or `limit` passes (a bound, not a timing).
bool WaitUntil(const std::function<bool()>& done, std::chrono::seconds limit = std::chrono::seconds(20)) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  while (!done()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(milliseconds(2));
  }
  return true;
}

TEST(SuffixCacheLeaseTest, StartsOverTheBudgetAreRefusedAndTheRunningServed) {
  StoreOptions so;
  so.max_bytes = 1 << 20;
  TestServer server(so, ServiceLimits{});
  std::vector<std::string> admitted;
  grpc::Status refused;
  for (int i = 0; i < 20 && refused.ok(); ++i) {
    const std::string id = absl::StrCat("r", i);
    refused = Start(server, id, Tokens(100000 * (i + 1), 2000));
    if (refused.ok()) admitted.push_back(id);
  }
  ASSERT_GE(admitted.size(), 2u);
  ASSERT_EQ(refused.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << refused.error_message();
  EXPECT_NE(refused.error_message().find("active requests hold"), std::string::npos) << refused.error_message();
  EXPECT_NE(refused.error_message().find("of --max-bytes 1048576"), std::string::npos) << refused.error_message();
  EXPECT_EQ(server.service.rejected_total(), 1);
  EXPECT_LE(server.store.Stats().active_bytes, so.max_bytes);
  {  // GetStats shows what the refusal was about
    floe::v1::SuffixStats stats;
    grpc::ClientContext ctx;
    ASSERT_TRUE(server.stub->GetStats(&ctx, {}, &stats).ok());
    EXPECT_EQ(stats.active_bytes(), server.store.Stats().active_bytes);
    EXPECT_GT(stats.active_bytes(), 0);
    EXPECT_EQ(stats.refused_starts_total(), 1);
    EXPECT_EQ(stats.max_bytes(), so.max_bytes);
  }

  // Every running request is still served: a draft from its own prompt.
  for (size_t i = 0; i < admitted.size(); ++i) {
    const int32_t base = 100000 * static_cast<int32_t>(i + 1);
    const floe::v1::SuffixDraft d = StepOne(server, admitted[i], 0, Tokens(base + 100, 4));
    ASSERT_EQ(d.code(), 0) << d.error();
    ASSERT_GT(d.token_ids_size(), 0);
    EXPECT_EQ(d.token_ids(0), base + 104);
  }
  // Once they end, the bytes are back to the baseline and a start succeeds.
  for (const std::string& id : admitted) ASSERT_TRUE(End(server, id).ok()) << id;
  EXPECT_EQ(server.store.Stats().active_bytes, 0);
  EXPECT_TRUE(Start(server, "after", Tokens(7, 2000)).ok());
  EXPECT_TRUE(server.store.CheckIntegrity().ok()) << server.store.CheckIntegrity();
}

// The lease's clock moves only when the test says so; the reaper thread
// sweeps on its own (every 50 ms of real time) whenever it likes.
TEST(SuffixCacheLeaseTest, AnIdleRequestExpiresOneThatKeepsSteppingDoesNot) {
  std::atomic<int64_t> now_ms{1000000};
  StoreOptions so;
  so.request_lease = milliseconds(200);
  so.clock = [&] { return std::chrono::steady_clock::time_point(milliseconds(now_ms.load())); };
  TestServer server(so, ServiceLimits{});
  ASSERT_TRUE(Start(server, "idle", Tokens(1, 100)).ok());
  ASSERT_TRUE(Start(server, "busy", Tokens(1000, 100)).ok());
  const int64_t both = server.store.Stats().active_bytes;

  const std::vector<int32_t> tokens = Tokens(5000, 40);
  for (int step = 0; step < 10; ++step) {
    now_ms.fetch_add(150);  // "busy" is never idle for a whole lease
    const std::vector<int32_t> part(tokens.begin() + 4 * step, tokens.begin() + 4 * step + 4);
    const floe::v1::SuffixDraft d = StepOne(server, "busy", 4 * step, part);
    ASSERT_EQ(d.code(), 0) << "step " << step << ": " << d.error();
  }
  ASSERT_TRUE(WaitUntil([&] { return server.store.Stats().expired_total == 1; }))
      << "the reaper never expired 'idle'";

  const floe::v1::SuffixDraft gone = StepOne(server, "idle", 0, {});
  EXPECT_EQ(gone.code(), kNotFound) << gone.error();
  EXPECT_NE(gone.error().find("request_id 'idle'"), std::string::npos) << gone.error();
  EXPECT_NE(gone.error().find("expired"), std::string::npos) << gone.error();
  const floe::v1::SuffixDraft busy = StepOne(server, "busy", 40, {});
  EXPECT_EQ(busy.code(), 0) << busy.error();

  const StoreStats stats = server.store.Stats();
  EXPECT_EQ(stats.active, 1);
  EXPECT_EQ(stats.expired_total, 1);
  EXPECT_LT(stats.active_bytes, both);
  ASSERT_TRUE(End(server, "busy").ok());
  EXPECT_EQ(server.store.Stats().active_bytes, 0);
}

// The same with the real clock: a request nobody calls about (its worker was
// killed) is expired by the reaper and its memory released.
TEST(SuffixCacheLeaseTest, AnAbandonedRequestExpiresOnTheRealClock) {
  StoreOptions so;
  so.request_lease = milliseconds(200);
  TestServer server(so, ServiceLimits{});
  ASSERT_TRUE(Start(server, "orphan", Tokens(1, 5000)).ok());
  ASSERT_GT(server.store.Stats().active_bytes, 0);
  ASSERT_TRUE(WaitUntil([&] { return server.store.Stats().active == 0; })) << "never expired";
  const StoreStats stats = server.store.Stats();
  EXPECT_EQ(stats.expired_total, 1);
  EXPECT_EQ(stats.active_bytes, 0);
  EXPECT_EQ(StepOne(server, "orphan", 0, {}).code(), kNotFound);
  floe::v1::SuffixStats reported;
  grpc::ClientContext ctx;
  ASSERT_TRUE(server.stub->GetStats(&ctx, {}, &reported).ok());
  EXPECT_EQ(reported.expired_requests_total(), 1);
  // Reaper and server stop cleanly with the TestServer (no hang at exit).
}

}  // namespace
}  // namespace floe::suffix_cache
