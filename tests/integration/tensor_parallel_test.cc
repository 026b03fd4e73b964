// A worker over several ranks (floe-worker --tensor-parallel-size 2,
// --sequence-parallel-size 2, or both with Shift Parallelism: rank 0 plus
// child rank processes, Gloo on loopback) behind the router: the same
// greedy tokens as one rank through chunked prefill, prefix-cache hits,
// batching, ngram speculation and (shift) preemption. TP and shift may
// differ only where one rank's top-2 logprob margin is within the
// tolerance; SP must give identical tokens and logprobs (its kernels see
// the same rows and heads). A rank killed under load takes its worker down (exit non-zero)
// and the router serves on.
#include <dirent.h>
#include <signal.h>
#include <sys/wait.h>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "common/metrics/http_get.h"
#include "tests/integration/greedy_tokens.h"
#include "tests/integration/local_cluster.h"

namespace floe::testing {
namespace {

using floe::v1::GenerateRequest;

const std::vector<std::string>& Prompts() {
  static const std::vector<std::string> prompts = {
      "The quick brown fox jumps over the lazy dog, again and again and again",
      "Tensor parallel ranks must agree",
      "The quick brown fox jumps over the lazy dog, again and again and again",  // a prefix-cache hit
      std::string(300, 'a') + " a long prompt in many chunks",
  };
  return prompts;
}

// Measures the step cost curve at start (the production default), so the
// leader's timing forwards run over both ranks.
std::vector<std::string> TpArgs() {
  return {"--tensor-parallel-size", "2", "--threads-per-rank", "1", "--speculative", "ngram",
          "--max-num-batched-tokens", "16", "--speculative-cost-curve", "measure"};
}

std::vector<std::string> SpArgs() {
  return {"--sequence-parallel-size", "2", "--parallel-mode", "sp", "--threads-per-rank", "1", "--speculative",
          "ngram", "--max-num-batched-tokens", "16"};
}

// Shift Parallelism on 2 x 2 ranks from a measured profile (the shape
// bench_shift prints): 1-token steps SP x TP (a row on one rank of each SP
// group), 2 to 7 tokens TP (decodes with ngram drafts), 8 and more (prefill
// chunks of 16, batched steps) SP x TP. A KV cache of 8 blocks of 16
// (4 KiB each in f32 on a rank of the tiny model) preempts under the batch.
std::vector<std::string> ShiftArgs() {
  const std::string profile = ::testing::TempDir() + "/tensor_parallel_shift_profile.json";
  std::ofstream(profile) << R"({"points": [{"tokens": 1, "tp_s": 0.2, "sp_s": 0.1},
      {"tokens": 2, "tp_s": 0.2, "sp_s": 0.3}, {"tokens": 8, "tp_s": 0.5, "sp_s": 0.4}]})";
  return {"--tensor-parallel-size", "2", "--sequence-parallel-size", "2", "--threads-per-rank", "1",
          "--speculative", "ngram", "--max-num-batched-tokens", "16", "--shift-profile", profile,
          "--kv-cache-gb", "0.0000306", "--kv-cache-dtype", "f32"};
}

double Metric(const std::string& metrics, absl::string_view prefix, absl::string_view label = "") {
  for (absl::string_view line : absl::StrSplit(metrics, '\n')) {
    if (!absl::StartsWith(line, prefix) || !absl::StrContains(line, label)) continue;
    const size_t space = line.rfind(' ');
    return std::atof(std::string(line.substr(space + 1)).c_str());
  }
  return -1;
}

TEST(TensorParallelClusterTest, TwoRanksServeTheSameTokensAsOne) {
  std::vector<GreedyOutput> want;
  {
    LocalCluster one(1, {"--speculative", "ngram", "--max-num-batched-tokens", "16"});
    ASSERT_TRUE(one.ok());
    auto stub = one.RouterStub();
    for (const std::string& p : Prompts()) want.push_back(StreamGreedy(*stub, GreedyRequest(p, 24)));
  }
  LocalCluster tp(1, TpArgs());
  ASSERT_TRUE(tp.ok());
  auto stub = tp.RouterStub();
  auto compare = [&](const GreedyOutput& got, const GreedyOutput& w, size_t i) {
    ExpectSameGreedyTokens(got, w, kTensorParallelMarginTolerance, absl::StrCat("prompt ", i));
  };
  for (size_t i = 0; i < Prompts().size(); ++i)
    compare(StreamGreedy(*stub, GreedyRequest(Prompts()[i], 24)), want[i], i);
  // Batched: all four at once.
  std::vector<GreedyOutput> got(Prompts().size());
  std::vector<std::thread> clients;
  for (size_t i = 0; i < Prompts().size(); ++i)
    clients.emplace_back([&, i] { got[i] = StreamGreedy(*stub, GreedyRequest(Prompts()[i], 24)); });
  for (auto& c : clients) c.join();
  for (size_t i = 0; i < Prompts().size(); ++i) compare(got[i], want[i], i);

  // Sequence parallel: bit for bit, logprobs included.
  LocalCluster sp(1, SpArgs());
  ASSERT_TRUE(sp.ok());
  auto sp_stub = sp.RouterStub();
  std::vector<GreedyOutput> sp_got(Prompts().size());
  std::vector<std::thread> sp_clients;
  for (size_t i = 0; i < Prompts().size(); ++i)
    sp_clients.emplace_back([&, i] { sp_got[i] = StreamGreedy(*sp_stub, GreedyRequest(Prompts()[i], 24)); });
  for (auto& c : sp_clients) c.join();
  for (size_t i = 0; i < Prompts().size(); ++i)
    ExpectSameGreedyTokens(sp_got[i], want[i], 0, absl::StrCat("prompt ", i));
  // Its metrics say how it runs.
  const std::string metrics = HttpGet(MetricsUrl(sp.worker(0))).value_or("");
  bool sp_mode = false, two_ranks = false;
  for (absl::string_view line : absl::StrSplit(metrics, '\n')) {
    if (absl::StartsWith(line, "floe_parallel_mode{") && absl::StrContains(line, "mode=\"sp\"}"))
      sp_mode = absl::EndsWith(line, "} 1");
    if (absl::StartsWith(line, "floe_parallel_ranks{")) two_ranks = absl::EndsWith(line, "} 2");
  }
  EXPECT_TRUE(sp_mode && two_ranks) << metrics.substr(0, 3000);

  // Shift: alone, then batched (preempting), the same tokens at the margin;
  // its metrics show both modes, the switches and the preemptions.
  LocalCluster shift(1, ShiftArgs());
  ASSERT_TRUE(shift.ok());
  auto shift_stub = shift.RouterStub();
  for (size_t i = 0; i < Prompts().size(); ++i)
    compare(StreamGreedy(*shift_stub, GreedyRequest(Prompts()[i], 24)), want[i], i);
  std::vector<GreedyOutput> shift_got(Prompts().size());
  std::vector<std::thread> shift_clients;
  for (size_t i = 0; i < Prompts().size(); ++i)
    shift_clients.emplace_back(
        [&, i] { shift_got[i] = StreamGreedy(*shift_stub, GreedyRequest(Prompts()[i], 24)); });
  for (auto& c : shift_clients) c.join();
  for (size_t i = 0; i < Prompts().size(); ++i) compare(shift_got[i], want[i], i);
  const std::string m = HttpGet(MetricsUrl(shift.worker(0))).value_or("");
  EXPECT_EQ(Metric(m, "floe_parallel_ranks{"), 4) << m.substr(0, 3000);
  EXPECT_GT(Metric(m, "floe_parallel_mode_tokens_total{", "mode=\"tp\""), 0);
  EXPECT_GT(Metric(m, "floe_parallel_mode_tokens_total{", "mode=\"sp\""), 0);
  EXPECT_GT(Metric(m, "floe_parallel_mode_switches_total{"), 0);
  EXPECT_GT(Metric(m, "floe_parallel_collective_seconds_count{"), 0);
  EXPECT_GT(Metric(m, "floe_num_preemptions_total{"), 0);
  EXPECT_GT(Metric(m, "floe_spec_decode_num_draft_tokens_total{"), 0);
}

// The child processes of `parent` (its rank processes).
std::vector<pid_t> Children(pid_t parent) {
  std::vector<pid_t> out;
  DIR* proc = opendir("/proc");
  while (dirent* e = proc ? readdir(proc) : nullptr) {
    const pid_t pid = std::atoi(e->d_name);
    if (pid <= 0) continue;
    std::ifstream stat(absl::StrCat("/proc/", pid, "/stat"));
    std::string line;
    std::getline(stat, line);
    const size_t close = line.rfind(')');
    if (close == std::string::npos) continue;
    char state;
    int ppid = 0;
    if (std::sscanf(line.c_str() + close + 1, " %c %d", &state, &ppid) == 2 && ppid == parent) out.push_back(pid);
  }
  if (proc) closedir(proc);
  return out;
}

TEST(TensorParallelClusterTest, AKilledRankTakesItsWorkerDownAndTheRouterServesOn) {
  const std::string log = ::testing::TempDir() + "/tensor_parallel_killed_rank.log";
  std::remove(log.c_str());
  LocalCluster cluster(2, TpArgs(), {}, {.wrap = LogTo(log)});
  ASSERT_TRUE(cluster.ok());
  auto stub = cluster.RouterStub();
  std::atomic<bool> stop{false};
  std::atomic<int> ok{0}, failed{0};
  std::thread load([&] {
    for (int i = 0; !stop; ++i) {
      GenerateRequest r = GreedyRequest(absl::StrCat("load ", i), 16);
      r.set_session_id(absl::StrCat("s", i));
      Generation g = Generate(*stub, r, 30000);
      (g.status.ok() ? ok : failed)++;
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  const std::vector<pid_t> ranks = Children(cluster.worker(0).pid());
  ASSERT_EQ(ranks.size(), 1u);
  ASSERT_EQ(kill(ranks[0], SIGKILL), 0);
  // The worker notices at once (it watches its ranks) and exits non-zero.
  ASSERT_TRUE(WaitFor([&] { return cluster.worker(0).Exited(); }, std::chrono::seconds(30)));
  EXPECT_TRUE(WIFEXITED(cluster.worker(0).exit_status()) && WEXITSTATUS(cluster.worker(0).exit_status()) == 1);
  // Its log names the rank it lost (two_node_test expects the same line).
  EXPECT_NE(ReadWholeFile(log).find(RankFailedLog(1)), std::string::npos) << ReadWholeFile(log);
  const int ok_at_kill = ok.load();
  // The router ejects it; requests keep succeeding on the other worker.
  ASSERT_TRUE(WaitFor([&] { return ok.load() >= ok_at_kill + 5; }, std::chrono::seconds(60)));
  stop = true;
  load.join();
  for (int i = 0; i < 4; ++i) {
    GenerateRequest r = GreedyRequest(absl::StrCat("after ", i), 8);
    r.set_session_id(absl::StrCat("after", i));
    EXPECT_TRUE(Generate(*stub, r).status.ok());
  }
  std::printf("load during the kill: %d ok, %d failed (in flight on the dead worker)\n", ok.load(), failed.load());
}


// Ranks started elsewhere (another pod or machine, here another process
// started by hand): rank 0 with --rank-launch remote waits for them and
// serves the rendezvous store on its port; rank 1 meets it there with
// --rank-store. The worker then serves, and losing rank 1 takes it down.
TEST(TensorParallelClusterTest, RanksStartedElsewhereMeetThroughRankZero) {
  const std::vector<std::string> common = {"--model", TinyModelDir(), "--tensor-parallel-size", "2",
                                           "--threads-per-rank", "1", "--metrics-port", "-1"};
  std::vector<std::string> rank0 = {BinaryPath("floe-worker"), "--port", "0", "--rank-launch", "remote"};
  rank0.insert(rank0.end(), common.begin(), common.end());
  auto leader = Subprocess::Spawn(rank0);
  ASSERT_TRUE(leader.ok()) << leader.status();
  auto address = (*leader)->WaitForLine("worker listening on ", std::chrono::seconds(60));
  ASSERT_TRUE(address.ok()) << address.status();
  std::vector<std::string> rank1 = {BinaryPath("floe-worker"), "--rank", "1", "--rank-store", *address};
  rank1.insert(rank1.end(), common.begin(), common.end());
  auto follower = Subprocess::Spawn(rank1);
  ASSERT_TRUE(follower.ok()) << follower.status();
  auto channel = grpc::CreateChannel(*address, grpc::InsecureChannelCredentials());
  auto stub = floe::v1::Worker::NewStub(channel);
  // Serving once the ranks met and the model loaded.
  ASSERT_TRUE(WaitFor(
      [&] {
        grpc::ClientContext context;
        floe::v1::LoadReport load;
        return stub->GetLoad(&context, floe::v1::LoadRequest(), &load).ok();
      },
      std::chrono::seconds(60)));
  GenerateRequest r;
  r.mutable_token_ids()->add_ids(1);
  r.mutable_token_ids()->add_ids(2);
  r.mutable_token_ids()->add_ids(3);
  r.mutable_stopping()->set_max_tokens(8);
  r.mutable_stopping()->set_ignore_eos(true);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  auto reader = stub->Generate(&context, r);
  floe::v1::GenerateResponse response;
  int tokens = 0;
  while (reader->Read(&response)) tokens += response.has_chunk() ? response.chunk().token_ids_size() : 0;
  EXPECT_TRUE(reader->Finish().ok());
  EXPECT_EQ(tokens, 8);
  // The store closed once the ranks met: a late rank is told so.
  std::vector<std::string> late = {BinaryPath("floe-worker"), "--rank", "1", "--rank-store", *address};
  late.insert(late.end(), common.begin(), common.end());
  auto third = Subprocess::Spawn(late);
  ASSERT_TRUE(third.ok());
  EXPECT_TRUE(WaitFor([&] { return (*third)->Exited(); }, std::chrono::seconds(60)));
  EXPECT_TRUE(WIFEXITED((*third)->exit_status()) && WEXITSTATUS((*third)->exit_status()) == 1);
  // Rank 1 gone: rank 0 fails its next step and exits non-zero.
  kill((*follower)->pid(), SIGKILL);
  grpc::ClientContext again;
  again.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  auto reader2 = stub->Generate(&again, r);
  while (reader2->Read(&response)) {
  }
  (void)reader2->Finish();
  EXPECT_TRUE(WaitFor([&] { return (*leader)->Exited(); }, std::chrono::seconds(60)));
  EXPECT_TRUE(WIFEXITED((*leader)->exit_status()) && WEXITSTATUS((*leader)->exit_status()) == 1);
}

// A shift profile that cannot be used stops the worker at start (exit 2,
// before any model load): one that does not parse, and one with a pinned
// mode or a single SP rank (ShiftPolicyTest checks the messages).
TEST(TensorParallelClusterTest, AnUnusableShiftProfileStopsTheWorkerAtStart) {
  const std::string bad = ::testing::TempDir() + "/tensor_parallel_bad_profile.json";
  std::ofstream(bad) << R"({"points": [{"tokens": 0, "tp_s": 1, "sp_s": 1}]})";
  const std::string good = ::testing::TempDir() + "/tensor_parallel_good_profile.json";
  std::ofstream(good) << R"({"points": [{"tokens": 1, "tp_s": 1, "sp_s": 2}]})";
  const std::vector<std::vector<std::string>> refused = {
      {"--sequence-parallel-size", "2", "--shift-profile", bad},
      {"--sequence-parallel-size", "2", "--shift-profile", ::testing::TempDir() + "/absent_profile.json"},
      {"--sequence-parallel-size", "2", "--parallel-mode", "tp", "--shift-profile", good},
      {"--sequence-parallel-size", "2", "--shift-threshold", "8", "--shift-profile", good},
      {"--tensor-parallel-size", "2", "--shift-profile", good},
  };
  for (const auto& flags : refused) {
    std::vector<std::string> argv = {BinaryPath("floe-worker"), "--model", TinyModelDir(), "--port", "0",
                                     "--metrics-port", "-1"};
    argv.insert(argv.end(), flags.begin(), flags.end());
    auto worker = Subprocess::Spawn(argv);
    ASSERT_TRUE(worker.ok()) << worker.status();
    ASSERT_TRUE(WaitFor([&] { return (*worker)->Exited(); }, std::chrono::seconds(30))) << absl::StrJoin(flags, " ");
    EXPECT_TRUE(WIFEXITED((*worker)->exit_status()) && WEXITSTATUS((*worker)->exit_status()) == 2)
        << absl::StrJoin(flags, " ");
  }
}

}  // namespace
}  // namespace floe::testing
