// AdmissionGate: slots, FIFO hand-off to waiters (no thread held while
// waiting), the queue bound, the queue timeout and shutdown.
#include "services/router/admission_gate.h"

#include <future>
#include <vector>

#include "gtest/gtest.h"

namespace floe {
namespace {

using std::chrono::milliseconds;

TEST(AdmissionGateTest, AdmitsUpToTheLimitAtOnce) {
  AdmissionGate gate(2, 0, milliseconds(100));
  EXPECT_TRUE(gate.Enter().ok());
  EXPECT_TRUE(gate.Enter().ok());
  absl::Status third = gate.Enter();
  EXPECT_EQ(third.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(third.message().find("max_in_flight = 2"), std::string::npos) << third;
  gate.Leave();
  EXPECT_TRUE(gate.Enter().ok());
  EXPECT_EQ(gate.in_flight(), 2);
  EXPECT_EQ(gate.rejected(), 1);
}

TEST(AdmissionGateTest, WaitersGetFreedSlotsInArrivalOrder) {
  AdmissionGate gate(1, 8, milliseconds(10000));
  ASSERT_TRUE(gate.Enter().ok());
  std::vector<int> order;
  std::mutex mu;
  for (int i = 0; i < 3; ++i) {
    gate.EnterAsync([&, i](absl::Status s) {
      ASSERT_TRUE(s.ok()) << s;
      std::lock_guard<std::mutex> lock(mu);
      order.push_back(i);
    });
  }
  EXPECT_EQ(gate.queued(), 3);
  EXPECT_TRUE(order.empty());
  for (int i = 0; i < 3; ++i) gate.Leave();  // each Leave hands the slot on, on this thread
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(gate.in_flight(), 1);
  EXPECT_EQ(gate.queued(), 0);
}

TEST(AdmissionGateTest, QueueBoundRefusesAtOnce) {
  AdmissionGate gate(1, 1, milliseconds(10000));
  ASSERT_TRUE(gate.Enter().ok());
  gate.EnterAsync([](absl::Status) {});
  std::promise<absl::Status> refused;
  gate.EnterAsync([&](absl::Status s) { refused.set_value(s); });
  auto f = refused.get_future();
  ASSERT_EQ(f.wait_for(milliseconds(0)), std::future_status::ready);
  EXPECT_NE(f.get().message().find("max_queued = 1"), std::string::npos);
}

TEST(AdmissionGateTest, WaitersExpireAtTheQueueTimeout) {
  AdmissionGate gate(1, 4, milliseconds(200));
  ASSERT_TRUE(gate.Enter().ok());
  const auto start = std::chrono::steady_clock::now();
  absl::Status s = gate.Enter();
  const auto waited = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(s.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(s.message().find("queue_timeout = 200 ms"), std::string::npos) << s;
  EXPECT_GE(waited, milliseconds(190));
  EXPECT_LT(waited, milliseconds(2000));
  EXPECT_EQ(gate.queued(), 0);
  // The slot holder is unaffected, and the next Leave frees the slot.
  gate.Leave();
  EXPECT_EQ(gate.in_flight(), 0);
}

TEST(AdmissionGateTest, ShutdownAnswersEveryWaiter) {
  std::promise<absl::Status> answer;
  {
    AdmissionGate gate(1, 4, milliseconds(60000));
    ASSERT_TRUE(gate.Enter().ok());
    gate.EnterAsync([&](absl::Status s) { answer.set_value(s); });
  }
  auto f = answer.get_future();
  ASSERT_EQ(f.wait_for(milliseconds(0)), std::future_status::ready);
  EXPECT_EQ(f.get().code(), absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace floe
