// GlooCommunicator over real Gloo TCP on loopback, one thread per rank:
// every collective against a brute-force oracle for 2-4 ranks (uneven and
// zero all-to-all counts included), and the failures a worker must survive:
// a rank that never shows up, a rank that stops taking part, a rank whose
// connections break (named by its world rank).
#include "services/worker/parallel/gloo_communicator.h"

#include <sys/wait.h>
#include <unistd.h>

#include <csignal>

#include <atomic>
#include <filesystem>
#include <functional>
#include <random>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace floe {
namespace {

namespace fs = std::filesystem;

std::string FreshStoreDir() {
  static std::atomic<int> n{0};
  fs::path dir = fs::temp_directory_path() / ("floe_gloo_" + std::to_string(getpid()) + "_" + std::to_string(n++));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir.string();
}

// Runs fn(comm) on `size` ranks, one thread each; fails the test on any
// rendezvous error.
void OnRanks(int size, const std::function<void(Communicator&)>& fn,
             std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
  const std::string dir = FreshStoreDir();
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      auto comm = GlooCommunicator::Connect({.rank = r, .size = size, .store_dir = dir, .timeout = timeout});
      ASSERT_TRUE(comm.ok()) << comm.status();
      EXPECT_EQ((*comm)->rank(), r);
      EXPECT_EQ((*comm)->size(), size);
      fn(**comm);
    });
  }
  for (auto& t : threads) t.join();
  fs::remove_all(dir);
}

// Rank r's deterministic input element i.
float Input(int rank, size_t i) { return static_cast<float>((rank + 1) * 1000 + static_cast<int>(i % 997)) * 0.25f; }

TEST(GlooCommunicatorTest, AllReduceAllGatherBroadcastBarrierMatchTheOracle) {
  for (int size : {2, 3, 4}) {
    SCOPED_TRACE(size);
    OnRanks(size, [&](Communicator& c) {
      for (size_t n : {size_t{1}, size_t{7}, size_t{4096}}) {
        std::vector<float> data(n);
        for (size_t i = 0; i < n; ++i) data[i] = Input(c.rank(), i);
        ASSERT_TRUE(c.AllReduceSum(data).ok());
        for (size_t i = 0; i < n; ++i) {
          float want = 0;
          for (int r = 0; r < size; ++r) want += Input(r, i);  // small integers / 4: exact in any order
          ASSERT_EQ(data[i], want) << i;
        }
        std::vector<float> mine(n), all(n * size);
        for (size_t i = 0; i < n; ++i) mine[i] = Input(c.rank(), i);
        ASSERT_TRUE(c.AllGather(mine, all).ok());
        for (int r = 0; r < size; ++r)
          for (size_t i = 0; i < n; ++i) ASSERT_EQ(all[r * n + i], Input(r, i));
        for (int root = 0; root < size; ++root) {
          std::vector<std::byte> bytes(n + 3, std::byte{0});
          if (c.rank() == root)
            for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = std::byte(static_cast<uint8_t>(i * 7 + root));
          ASSERT_TRUE(c.Broadcast(bytes, root).ok());
          for (size_t i = 0; i < bytes.size(); ++i) ASSERT_EQ(bytes[i], std::byte(static_cast<uint8_t>(i * 7 + root)));
        }
        ASSERT_TRUE(c.Barrier().ok());
      }
    });
  }
}

TEST(GlooCommunicatorTest, AllToAllWithUnevenAndZeroCounts) {
  for (int size : {2, 3, 4}) {
    SCOPED_TRACE(size);
    // count[s][d]: floats rank s sends rank d; zeros on purpose.
    std::mt19937 rng(size);
    std::vector<std::vector<int64_t>> count(size, std::vector<int64_t>(size));
    for (auto& row : count)
      for (auto& x : row) x = rng() % 3 == 0 ? 0 : static_cast<int64_t>(rng() % 9);
    auto value = [](int from, int to, int64_t i) { return static_cast<float>(from * 10000 + to * 100 + i); };
    OnRanks(size, [&](Communicator& c) {
      const int me = c.rank();
      std::vector<int64_t> send(size), recv(size);
      std::vector<float> in;
      for (int d = 0; d < size; ++d) {
        send[d] = count[me][d];
        recv[d] = count[d][me];
        for (int64_t i = 0; i < send[d]; ++i) in.push_back(value(me, d, i));
      }
      int64_t total = 0;
      for (int64_t x : recv) total += x;
      std::vector<float> out(total, -1.0f);
      ASSERT_TRUE(c.AllToAll(in, send, out, recv).ok());
      size_t at = 0;
      for (int s = 0; s < size; ++s)
        for (int64_t i = 0; i < recv[s]; ++i) ASSERT_EQ(out[at++], value(s, me, i)) << "from " << s;
      // Counts that do not add up are refused before any message is sent.
      std::vector<float> short_out(total + 1);
      EXPECT_EQ(c.AllToAll(in, send, short_out, recv).code(), absl::StatusCode::kInvalidArgument);
    });
  }
}

TEST(GlooCommunicatorTest, ARankThatNeverShowsUpFailsTheRendezvousWithinTheDeadline) {
  const std::string dir = FreshStoreDir();
  const auto start = std::chrono::steady_clock::now();
  auto comm = GlooCommunicator::Connect({.rank = 0,
                                        .size = 2,
                                        .store_dir = dir,
                                        .timeout = std::chrono::milliseconds(1500),
                                        .rendezvous_timeout = std::chrono::milliseconds(1500)});
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ASSERT_FALSE(comm.ok());
  EXPECT_EQ(comm.status().code(), absl::StatusCode::kDeadlineExceeded) << comm.status();
  EXPECT_LT(waited, 30.0);  // the deadline, not a hang (bound loose for a loaded machine)
  fs::remove_all(dir);
}

TEST(GlooCommunicatorTest, ARankThatStopsTakingPartFailsTheOthersWithinTheDeadline) {
  const std::string dir = FreshStoreDir();
  std::atomic<bool> done{false};
  std::thread quiet([&] {
    auto comm = GlooCommunicator::Connect(
        {.rank = 1, .size = 2, .store_dir = dir, .timeout = std::chrono::milliseconds(1500)});
    ASSERT_TRUE(comm.ok()) << comm.status();
    while (!done) std::this_thread::sleep_for(std::chrono::milliseconds(10));  // never joins the all-reduce
  });
  auto comm = GlooCommunicator::Connect(
      {.rank = 0, .size = 2, .store_dir = dir, .timeout = std::chrono::milliseconds(1500)});
  ASSERT_TRUE(comm.ok()) << comm.status();
  std::vector<float> data(16, 1.0f);
  const absl::Status s = (*comm)->AllReduceSum(data);
  EXPECT_EQ(s.code(), absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_NE(s.message().find("rank 0"), absl::string_view::npos) << s;
  // Unusable from then on: a later call says so instead of waiting again.
  EXPECT_EQ((*comm)->Barrier().code(), absl::StatusCode::kFailedPrecondition);
  done = true;
  quiet.join();
  fs::remove_all(dir);
}

TEST(GlooCommunicatorTest, ARankProcessThatDiesFailsTheOthersWithinTheDeadline) {
  const std::string dir = FreshStoreDir();
  const GlooOptions one{.rank = 1, .size = 2, .store_dir = dir, .timeout = std::chrono::seconds(5)};
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {  // rank 1: joins, then dies as kill -9 would leave it (no goodbye)
    auto comm = GlooCommunicator::Connect(one);
    _exit(comm.ok() && (*comm)->Barrier().ok() ? 0 : 1);
  }
  GlooOptions zero = one;
  zero.rank = 0;
  auto comm = GlooCommunicator::Connect(zero);
  ASSERT_TRUE(comm.ok()) << comm.status();
  ASSERT_TRUE((*comm)->Barrier().ok());  // both fully connected before rank 1 goes
  // Writing to the dead peer must come back as an error, not SIGPIPE's kill.
  struct sigaction pipe_action {};
  ASSERT_EQ(sigaction(SIGPIPE, nullptr, &pipe_action), 0);
  EXPECT_EQ(pipe_action.sa_handler, SIG_IGN);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  std::vector<float> data(1 << 16, 1.0f);
  const auto start = std::chrono::steady_clock::now();
  const absl::Status s = (*comm)->AllReduceSum(data);
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_FALSE(s.ok());
  EXPECT_TRUE(s.code() == absl::StatusCode::kUnavailable || s.code() == absl::StatusCode::kDeadlineExceeded) << s;
  EXPECT_LT(waited, 30.0);
  // Its connection broke: the failure names it (the worker's log line).
  EXPECT_EQ(LostRank(s), 1) << s;
  fs::remove_all(dir);
}

// On a 2 x 2 grid, world rank 3 goes (its connections close): rank 1, in TP
// group 1 with it (group ranks 0 and 1), learns from its group's all-reduce
// that world rank 3 was lost, not its group rank.
TEST(GlooCommunicatorTest, ABrokenConnectionNamesTheLostWorldRank) {
  const std::string dir = FreshStoreDir();
  std::atomic<bool> gone{false}, seen{false};
  absl::Status failed;
  std::vector<std::thread> threads;
  for (int r = 0; r < 4; ++r) {
    threads.emplace_back([&, r] {
      // Rank 3 says it went, and rank 1 that it saw it, on every way out
      // (a failed assertion too), so no thread waits for good.
      struct Signal {
        std::atomic<bool>* flag;
        ~Signal() {
          if (flag) *flag = true;
        }
      } done{r == 3 ? &gone : r == 1 ? &seen : nullptr};
      auto grid = ConnectGlooGrid({.rank = r, .size = 4, .store_dir = dir, .timeout = std::chrono::seconds(10)}, 2);
      ASSERT_TRUE(grid.ok()) << grid.status();
      ASSERT_TRUE(grid->tensor && grid->sequence);
      if (r == 3) {
        *grid = GlooGrid();  // closes every connection, as an exit would
      } else if (r == 1) {
        while (!gone) std::this_thread::sleep_for(std::chrono::milliseconds(5));
        std::vector<float> data(1 << 12, 1.0f);
        failed = grid->tensor->AllReduceSum(data);
      } else {
        while (!seen) std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failed.code(), absl::StatusCode::kUnavailable) << failed;
  EXPECT_EQ(LostRank(failed), 3) << failed;
  EXPECT_NE(failed.message().find("lost rank 3"), absl::string_view::npos) << failed;
  EXPECT_EQ(LostRank(absl::UnavailableError("no payload")), -1);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace floe
