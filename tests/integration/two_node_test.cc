// A worker's ranks on two "nodes" (two network namespaces joined by a veth
// pair: tests/integration/two_nodes.h), as a LeaderWorkerSet places them
// on Kubernetes: rank 0 (--rank-launch remote), the router and the client
// on node 0, rank 1 on node 1, meeting rank 0 through its store
// (--rank-store), so every collective crosses the veth pair. A T=2 and an
// SP=2 worker serve the same greedy tokens as one rank through the router
// (TP up to the top-2 margin, SP bit for bit), the veth counters show their
// collectives went over it, and killing the remote rank takes the worker
// down (exit 1) with the log line that names the rank, as in one pod
// (tensor_parallel_test). Skipped, with the reason, where this process may
// not make network namespaces.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <thread>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "services/worker/model/checkpoint_writer.h"
#include "tests/integration/greedy_tokens.h"
#include "tests/integration/local_cluster.h"
#include "tests/integration/two_nodes.h"

namespace floe::testing {
namespace {

const std::vector<std::string>& Prompts() {
  static const std::vector<std::string> prompts = {
      "The quick brown fox jumps over the lazy dog, again and again and again",
      "Ranks on two nodes must agree",
      std::string(200, 'a') + " a long prompt in many chunks",
  };
  return prompts;
}
constexpr int kMaxTokens = 16;
// Prefill in chunks of 16: the long prompt takes many steps.
const std::vector<std::string> kBatching = {"--max-num-batched-tokens", "16"};

// A worker of two ranks split over the nodes: rank 0 and the router on node
// 0 (rank 0's log in `log`), rank 1 on node 1 with rank 0's own flags.
struct SplitWorker {
  ~SplitWorker() { std::remove(log.c_str()); }  // failures print it
  std::string log;
  std::unique_ptr<Subprocess> remote_rank;
  std::unique_ptr<LocalCluster> cluster;  // destroyed first: rank 1 then sees rank 0 go
};

std::unique_ptr<SplitWorker> StartSplitWorker(const TwoNodes& nodes, const std::vector<std::string>& parallel,
                                              const std::string& name) {
  auto worker = std::make_unique<SplitWorker>();
  worker->log = absl::StrCat(::testing::TempDir(), "/two_node_", getpid(), "_", name, "_rank0.log");
  std::vector<std::string> args = parallel;
  args.insert(args.end(), kBatching.begin(), kBatching.end());
  args.insert(args.end(), {"--threads-per-rank", "1", "--host", TwoNodes::kAddress[0], "--rank-launch", "remote",
                           "--rank-host", TwoNodes::kAddress[0]});
  WorkerHooks hooks;
  hooks.wrap = nodes.On(0);
  for (std::string& part : LogTo(worker->log)) hooks.wrap.push_back(std::move(part));
  hooks.on_listening = [&](int, const std::string& address, const std::vector<std::string>& argv) {
    std::vector<std::string> rank1 = nodes.On(1);
    rank1.insert(rank1.end(), argv.begin(), argv.end());
    rank1.insert(rank1.end(), {"--rank", "1", "--rank-store", address, "--rank-host", TwoNodes::kAddress[1],
                               "--metrics-port", "-1"});
    auto spawned = Subprocess::Spawn(rank1);
    if (!spawned.ok()) return false;
    worker->remote_rank = std::move(spawned).value();
    return true;
  };
  worker->cluster = std::make_unique<LocalCluster>(1, args, std::vector<std::string>{}, hooks);
  return worker;
}

class TwoNodeTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto nodes = TwoNodes::Create();
    if (!nodes.ok()) {
      skip_reason_ = std::string(nodes.status().message());
      return;
    }
    nodes_ = std::move(nodes).value();
    skip_reason_.clear();
    // The router and this process's client on node 0 with rank 0.
    if (absl::Status entered = nodes_->EnterNodeZero(); !entered.ok()) setup_error_ = std::string(entered.message());
  }
  static void TearDownTestSuite() { nodes_.reset(); }

  void SetUp() override {
    if (!skip_reason_.empty()) GTEST_SKIP() << "two nodes need network namespaces: " << skip_reason_;
    ASSERT_TRUE(setup_error_.empty()) << setup_error_;
  }

  // The one-rank worker's greedy outputs (made once).
  static const std::vector<GreedyOutput>& OneRank() {
    static const std::vector<GreedyOutput>* want = [] {
      auto* out = new std::vector<GreedyOutput>();
      LocalCluster one(1, kBatching);
      EXPECT_TRUE(one.ok());
      if (!one.ok()) return out;
      auto stub = one.RouterStub();
      for (const std::string& p : Prompts()) out->push_back(StreamGreedy(*stub, GreedyRequest(p, kMaxTokens)));
      return out;
    }();
    return *want;
  }

  // Each prompt alone, then all at once, against one rank; the tokens served.
  int64_t ExpectTheTokensOfOneRank(SplitWorker& worker, double margin_tolerance) {
    const std::vector<GreedyOutput>& want = OneRank();
    EXPECT_EQ(want.size(), Prompts().size());
    if (want.size() != Prompts().size()) return 0;
    auto stub = worker.cluster->RouterStub();
    int64_t tokens = 0;
    for (size_t i = 0; i < Prompts().size(); ++i) {
      const GreedyOutput got = StreamGreedy(*stub, GreedyRequest(Prompts()[i], kMaxTokens));
      ExpectSameGreedyTokens(got, want[i], margin_tolerance, absl::StrCat("prompt ", i));
      tokens += static_cast<int64_t>(got.ids.size());
    }
    std::vector<GreedyOutput> got(Prompts().size());
    std::vector<std::thread> clients;
    for (size_t i = 0; i < Prompts().size(); ++i)
      clients.emplace_back([&, i] { got[i] = StreamGreedy(*stub, GreedyRequest(Prompts()[i], kMaxTokens)); });
    for (auto& c : clients) c.join();
    for (size_t i = 0; i < Prompts().size(); ++i) {
      ExpectSameGreedyTokens(got[i], want[i], margin_tolerance, absl::StrCat("batched prompt ", i));
      tokens += static_cast<int64_t>(got[i].ids.size());
    }
    return tokens;
  }

  // Serves the prompts on a worker split over the nodes and checks that the
  // veth pair carried what its collectives must: rank 0 samples each token
  // from a whole logits row, gathered from every rank's vocabulary slice
  // (the CPU backend's vocab-parallel logits, in TP and SP alike), so rank
  // 1's half of a row crossed for every token served. Over loopback the
  // veth would carry nothing.
  void ServeAcrossTheVeth(const std::vector<std::string>& parallel, const std::string& name, double margin_tolerance) {
    auto worker = StartSplitWorker(*nodes_, parallel, name);
    ASSERT_TRUE(worker->cluster->ok()) << ReadWholeFile(worker->log);
    auto before = nodes_->VethBytes(1);
    ASSERT_TRUE(before.ok()) << before.status();
    const int64_t tokens = ExpectTheTokensOfOneRank(*worker, margin_tolerance);
    auto after = nodes_->VethBytes(1);
    ASSERT_TRUE(after.ok()) << after.status();
    auto config = PresetConfig("tiny", "");
    ASSERT_TRUE(config.ok()) << config.status();
    const int64_t rank1_slice = config->vocab_size - config->vocab_size / 2;
    const int64_t must = tokens * rank1_slice * static_cast<int64_t>(sizeof(float));
    std::printf("%s: %lld tokens, node 1's veth carried %lld bytes (at least %lld expected)\n", name.c_str(),
                static_cast<long long>(tokens), static_cast<long long>(*after - *before), static_cast<long long>(must));
    EXPECT_GT(tokens, 0);
    EXPECT_GE(*after - *before, must);
  }

  static inline std::unique_ptr<TwoNodes> nodes_;
  static inline std::string skip_reason_ = "not set up";
  static inline std::string setup_error_;
};

TEST_F(TwoNodeTest, TensorParallelRanksOnTwoNodesServeTheTokensOfOneRank) {
  ServeAcrossTheVeth({"--tensor-parallel-size", "2"}, "tp", kTensorParallelMarginTolerance);
}

TEST_F(TwoNodeTest, SequenceParallelRanksOnTwoNodesServeTheTokensOfOneRank) {
  ServeAcrossTheVeth({"--sequence-parallel-size", "2", "--parallel-mode", "sp"}, "sp", 0);
}

TEST_F(TwoNodeTest, KillingTheRemoteRankTakesTheWorkerDownNamingIt) {
  auto worker = StartSplitWorker(*nodes_, {"--tensor-parallel-size", "2"}, "kill");
  ASSERT_TRUE(worker->cluster->ok()) << ReadWholeFile(worker->log);
  auto stub = worker->cluster->RouterStub();
  ASSERT_TRUE(Generate(*stub, GreedyRequest("before", 4)).status.ok());
  ASSERT_EQ(kill(worker->remote_rank->pid(), SIGKILL), 0);
  // Rank 0 learns it at its next collective: a request makes one.
  (void)Generate(*stub, GreedyRequest("after", 4), 30000);
  Subprocess& rank0 = worker->cluster->worker(0);
  ASSERT_TRUE(WaitFor([&] { return rank0.Exited(); }, std::chrono::seconds(60))) << ReadWholeFile(worker->log);
  EXPECT_TRUE(WIFEXITED(rank0.exit_status()) && WEXITSTATUS(rank0.exit_status()) == 1) << rank0.exit_status();
  const std::string log = ReadWholeFile(worker->log);
  EXPECT_NE(log.find(RankFailedLog(1)), std::string::npos) << log;
}

}  // namespace
}  // namespace floe::testing
