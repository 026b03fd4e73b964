// SuffixCacheClient: late answers are dropped at the deadline, a stopped
// replica fails fast, namespaces route to their replica.
#include <chrono>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "gtest/gtest.h"
#include "services/suffix_cache/client/suffix_cache_client.h"
#include "tests/services/suffix_cache/service/test_server.h"

namespace floe::suffix_cache {
namespace {

using Clock = std::chrono::steady_clock;

// The bound a call must return within when it fails at its deadline (5 or
// 20 ms here): far above it, so a sanitized build beside busy CPUs still
// meets it, and far below what a call that waited would take (the held
// answer below, gRPC's 20 s connect timeout).
constexpr double kFailFastMs = 2000;

// Holds every Step's answer until `release` (or 60 s): every answer is late,
// by much more than kFailFastMs.
class SlowService final : public floe::v1::SuffixCache::Service {
 public:
  grpc::Status Step(grpc::ServerContext*, const floe::v1::SuffixStepRequest* req,
                    floe::v1::SuffixStepResponse* resp) override {
    release.WaitForNotificationWithTimeout(absl::Seconds(60));
    for (int i = 0; i < req->entries_size(); ++i) resp->add_results()->add_token_ids(1);
    return grpc::Status::OK;
  }
  absl::Notification release;
};

floe::v1::SuffixStepRequest OneEntry(const std::string& ns, const std::string& id) {
  floe::v1::SuffixStepRequest req;
  auto* e = req.add_entries();
  e->set_namespace_(ns);
  e->set_request_id(id);
  e->set_speculate(true);
  return req;
}

TEST(SuffixCacheClientTest, LateAnswerIsDroppedAtTheDeadline) {
  SlowService slow;
  auto runner = ServerRunner::Start({"127.0.0.1:0"}, {&slow});
  ASSERT_TRUE(runner.ok());
  ClientOptions options;
  options.addresses = {(*runner)->address()};
  options.step_deadline = std::chrono::milliseconds(5);
  auto client = SuffixCacheClient::Create(options);
  ASSERT_TRUE(client.ok());
  // Connecting can take longer than the 5 ms deadline on a loaded machine
  // (the call then fails UNAVAILABLE while the channel backs off): wait until
  // the channel is up, i.e. a call reaches the server and runs out of time.
  const auto connect_deadline = Clock::now() + std::chrono::seconds(10);
  while ((*client)->Step(OneEntry("", "r")).results(0).code() != grpc::StatusCode::DEADLINE_EXCEEDED) {
    ASSERT_LT(Clock::now(), connect_deadline) << "the channel never connected";
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  for (int i = 0; i < 3; ++i) {
    const auto t0 = Clock::now();
    floe::v1::SuffixStepResponse resp = (*client)->Step(OneEntry("", "r"));
    const auto ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    ASSERT_EQ(resp.results_size(), 1);
    EXPECT_EQ(resp.results(0).code(), grpc::StatusCode::DEADLINE_EXCEEDED);
    EXPECT_EQ(resp.results(0).token_ids_size(), 0);
    // The held answer was not waited for.
    EXPECT_LT(ms, kFailFastMs) << "call " << i;
  }
  slow.release.Notify();
  (*runner)->Shutdown(std::chrono::milliseconds(0));
}

TEST(SuffixCacheClientTest, StoppedServerFailsFastWithinTheDeadline) {
  std::string address;
  {
    TestServer server(StoreOptions{}, ServiceLimits{});
    address = server.runner->address();
  }
  ClientOptions options;
  options.addresses = {address};
  options.step_deadline = std::chrono::milliseconds(5);
  options.call_deadline = std::chrono::milliseconds(20);
  auto client = SuffixCacheClient::Create(options);
  ASSERT_TRUE(client.ok());
  for (int i = 0; i < 5; ++i) {
    const auto t0 = Clock::now();
    floe::v1::SuffixStepResponse resp = (*client)->Step(OneEntry("", "r"));
    const auto ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    const int code = resp.results(0).code();
    EXPECT_TRUE(code == grpc::StatusCode::UNAVAILABLE || code == grpc::StatusCode::DEADLINE_EXCEEDED) << code;
    // Fails fast (not gRPC's seconds-long connect timeout).
    EXPECT_LT(ms, kFailFastMs) << "call " << i;
  }
  const auto t0 = Clock::now();
  absl::Status s = (*client)->StartRequest("", "r", {1, 2});
  EXPECT_FALSE(s.ok());
  const double start_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  EXPECT_LT(start_ms, kFailFastMs);
}

TEST(SuffixCacheClientTest, NamespacesRouteToTheirReplica) {
  TestServer a(StoreOptions{}, ServiceLimits{}), b(StoreOptions{}, ServiceLimits{});
  ClientOptions options;
  options.addresses = {a.runner->address(), b.runner->address()};
  options.step_deadline = std::chrono::milliseconds(500);  // loaded CI machines
  auto client = SuffixCacheClient::Create(options);
  ASSERT_TRUE(client.ok());
  std::string on[2];
  for (int i = 0; on[0].empty() || on[1].empty(); ++i) on[(*client)->ReplicaFor(absl::StrCat("ns", i))] = absl::StrCat("ns", i);
  for (int r = 0; r < 2; ++r) {
    ASSERT_TRUE((*client)->StartRequest(on[r], "w", {1, 2}).ok());
  }
  floe::v1::SuffixStepRequest step;
  for (int r = 0; r < 2; ++r) {
    auto* e = step.add_entries();
    e->set_namespace_(on[r]);
    e->set_request_id("w");
    e->add_appended(40 + r);
    e->add_appended(41);
    e->add_appended(42);
    e->set_speculate(true);
  }
  floe::v1::SuffixStepResponse resp = (*client)->Step(step);
  ASSERT_EQ(resp.results_size(), 2);
  for (int r = 0; r < 2; ++r) EXPECT_EQ(resp.results(r).code(), 0) << resp.results(r).error();
  for (int r = 0; r < 2; ++r) {
    auto cached = (*client)->EndRequest(on[r], "w");
    ASSERT_TRUE(cached.ok()) << cached.status();
    EXPECT_TRUE(*cached);
  }
  EXPECT_EQ(a.store.Stats().cached, 1);
  EXPECT_EQ(b.store.Stats().cached, 1);
  EXPECT_EQ(a.store.Stats().namespaces[0].name, on[0]);
  EXPECT_EQ(b.store.Stats().namespaces[0].name, on[1]);
  auto stats = (*client)->GetStats(1);
  ASSERT_TRUE(stats.ok());
  EXPECT_EQ(stats->cached_responses(), 1);
  EXPECT_EQ((*client)->AbortRequest(on[0], "w").code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace floe::suffix_cache
