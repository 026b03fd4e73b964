// The rendezvous store rank 0 serves (real gRPC on loopback): two ranks meet
// through it, rank 0 in process and rank 1 over gRPC, and their Gloo
// all-reduce works; bad keys and values are refused naming the limit; a
// missing key times out naming it; once closed, every call says so. With
// internal trust on, only ranks that send the internal key get in.
#include "services/worker/parallel/rank_store.h"

#include <grpcpp/grpcpp.h>

#include <thread>

#include <gtest/gtest.h>

#include "services/worker/parallel/gloo_communicator.h"

namespace floe {
namespace {

struct Server {
  RankStoreService service;
  std::unique_ptr<grpc::Server> server;
  std::string address;
  explicit Server(std::shared_ptr<const InternalTrust> trust = nullptr) : service(std::move(trust)) {
    int port = 0;
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(&service);
    server = builder.BuildAndStart();
    address = "127.0.0.1:" + std::to_string(port);
  }
  ~Server() { server->Shutdown(); }
};

TEST(RankStoreTest, TwoRanksMeetThroughIt) {
  Server s;
  RemoteRankStore remote(s.address);
  std::vector<float> sums[2];
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r) {
    ranks.emplace_back([&, r] {
      RendezvousStore* store = r == 0 ? &s.service.Local() : static_cast<RendezvousStore*>(&remote);
      auto grid = ConnectGlooGrid({.rank = r, .size = 2, .store = store}, 1);
      ASSERT_TRUE(grid.ok()) << grid.status();
      sums[r] = {1.0f + r, 10.0f * (r + 1)};
      ASSERT_TRUE(grid->world->AllReduceSum(sums[r]).ok());
    });
  }
  for (auto& t : ranks) t.join();
  EXPECT_EQ(sums[0], (std::vector<float>{3.0f, 30.0f}));
  EXPECT_EQ(sums[1], sums[0]);
  s.service.Close();
  const absl::Status closed = remote.Set("late", "x");
  EXPECT_EQ(closed.code(), absl::StatusCode::kFailedPrecondition) << closed;
  EXPECT_EQ(remote.Get("floe/0", std::chrono::milliseconds(10)).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(RankStoreTest, BoundsAndDeadlinesNameTheirLimits) {
  Server s;
  RemoteRankStore remote(s.address);
  const absl::Status long_key = remote.Set(std::string(257, 'k'), "v");
  EXPECT_EQ(long_key.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(long_key.message().find("257 bytes, must be 1-256"), std::string::npos) << long_key;
  const absl::Status big = remote.Set("k", std::string((64 << 10) + 1, 'v'));
  EXPECT_EQ(big.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(big.message().find("at most 65536"), std::string::npos) << big;
  auto missing = remote.Get("nobody", std::chrono::milliseconds(50));
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kDeadlineExceeded) << missing.status();
  EXPECT_NE(missing.status().message().find("nobody"), std::string::npos);
  ASSERT_TRUE(remote.Set("k", "v").ok());
  EXPECT_EQ(*remote.Get("k", std::chrono::milliseconds(50)), "v");
  for (size_t i = 1; i < RankStoreService::kMaxKeys; ++i) ASSERT_TRUE(s.service.Local().Set("k" + std::to_string(i), "").ok());
  EXPECT_EQ(remote.Set("one-too-many", "v").code(), absl::StatusCode::kResourceExhausted);
}

TEST(RankStoreTest, WithInternalTrustOnlyRanksWithTheKeyGetIn) {
  auto trust = InternalTrust::FromKey("rank-store-internal-key-0123456789");
  ASSERT_TRUE(trust.ok()) << trust.status();
  Server s(*trust);
  RemoteRankStore stranger(s.address);
  const absl::Status planted = stranger.Set("floe/1", "attacker:1234");
  EXPECT_EQ(planted.code(), absl::StatusCode::kUnauthenticated) << planted;
  EXPECT_NE(planted.message().find("RankStore.Set"), std::string::npos) << planted;
  ASSERT_TRUE(s.service.Local().Set("floe/0", "10.0.0.1:5000").ok());
  auto read = stranger.Get("floe/0", std::chrono::milliseconds(10));
  EXPECT_EQ(read.status().code(), absl::StatusCode::kUnauthenticated) << read.status();
  EXPECT_NE(read.status().message().find("RankStore.Get"), std::string::npos) << read.status();

  RemoteRankStore rank(s.address, nullptr, *trust);
  ASSERT_TRUE(rank.Set("floe/1", "10.0.0.2:5000").ok());
  EXPECT_EQ(*rank.Get("floe/0", std::chrono::milliseconds(10)), "10.0.0.1:5000");
  EXPECT_EQ(*s.service.Local().Get("floe/1", std::chrono::milliseconds(10)), "10.0.0.2:5000");
}

}  // namespace
}  // namespace floe
