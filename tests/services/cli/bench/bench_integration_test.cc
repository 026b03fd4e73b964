// floe bench end to end: a real `floe local --builtin tiny` cluster, a small
// closed-loop run whose counts and token totals must add up exactly, and a
// run against a port where nothing listens, which must end quickly with a
// partial result.
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "services/cli/commands.h"
#include "services/cli/subprocess.h"

namespace floe {
namespace {

std::string BinaryDir() {
  const char* dir = std::getenv("FLOE_BINARY_DIR");
  return dir ? dir : "build";
}

std::string TempPath(const std::string& name) { return "/tmp/" + name + "." + std::to_string(::getpid()) + ".json"; }

int Bench(std::vector<std::string> args) {
  args.insert(args.begin(), "bench");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  return RunBench(static_cast<int>(argv.size()), argv.data());
}

nlohmann::json ReadJson(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

// A loopback port with nothing listening: bind an ephemeral one, then close it.
int UnusedPort() {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  socklen_t len = sizeof addr;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

TEST(BenchIntegrationTest, TinyClusterCountsAndTokenTotalsAddUp) {
  auto cluster = Subprocess::Spawn({BinaryDir() + "/bin/floe", "local", "--builtin", "tiny"});
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  auto addr = (*cluster)->WaitForLine("router listening on ", std::chrono::seconds(60));
  ASSERT_TRUE(addr.ok()) << addr.status();

  const std::string json_path = TempPath("bench_integration");
  constexpr int kRequests = 12, kInput = 32, kOutput = 16;
  ASSERT_EQ(Bench({"--addr", *addr, "--workload", "random", "--num-requests", std::to_string(kRequests),
                   "--input-len", std::to_string(kInput), "--output-len", std::to_string(kOutput), "--ignore-eos",
                   "--max-concurrency", "4", "--seed", "1", "--warmup", "2", "--timeout-s", "30", "--no-progress",
                   "--goodput", "e2el:60000", "--json", json_path}),
            0);
  const nlohmann::json result = ReadJson(json_path);
  const nlohmann::json& summary = result["summary"];
  EXPECT_EQ(summary["completed"], kRequests);
  EXPECT_EQ(summary["failed"], 0);
  EXPECT_EQ(summary["total_output_tokens"], kRequests * kOutput);
  EXPECT_EQ(summary["total_input_tokens"], kRequests * kInput);
  EXPECT_EQ(summary["good_requests"], kRequests);
  EXPECT_LE(summary["peak_concurrency"].get<int>(), 4);
  EXPECT_EQ(summary["ttft_ms"]["count"], kRequests);
  EXPECT_EQ(summary["tpot_ms"]["count"], kRequests);
  EXPECT_EQ(summary["itl_ms"]["count"], kRequests * (kOutput - 1));  // one per token after the first
  for (const char* metric : {"ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"}) {
    for (const char* stat : {"mean", "p50", "p90", "p99"}) EXPECT_GT(summary[metric][stat].get<double>(), 0) << metric;
  }
  EXPECT_GT(summary["request_throughput"].get<double>(), 0);
  EXPECT_GT(summary["output_throughput"].get<double>(), 0);
  ASSERT_EQ(result["requests"].size(), static_cast<size_t>(kRequests));
  for (const nlohmann::json& r : result["requests"]) {
    EXPECT_TRUE(r["ok"].get<bool>()) << r["error"];
    EXPECT_EQ(r["prompt_tokens"], kInput);
    EXPECT_EQ(r["output_tokens"], kOutput);
    EXPECT_EQ(r["usage"]["prompt_tokens"], kInput);  // the server saw what was sent
    EXPECT_EQ(r["usage"]["completion_tokens"], kOutput);
    EXPECT_EQ(r["finish_reason"], "length");
    EXPECT_GE(r["e2e_ms"].get<double>(), r["ttft_ms"].get<double>());
  }
  std::remove(json_path.c_str());

  // A sweep, a comparison (the same server twice) and server-side metrics
  // from the /metrics lines `floe local` printed.
  std::string metrics;
  for (const std::string& line : (*cluster)->lines()) {
    if (line.rfind("metrics ", 0) == 0) metrics += (metrics.empty() ? "" : ",") + line.substr(line.rfind(' ') + 1);
  }
  ASSERT_FALSE(metrics.empty()) << "floe local printed no metrics lines";
  const std::string sweep_path = TempPath("bench_sweep");
  ASSERT_EQ(Bench({"--addr", *addr, "--num-requests", "4", "--input-len", "40", "--output-len", "4", "--ignore-eos",
                   "--prefix-len", "32", "--sweep", "concurrency=1,2", "--compare", *addr, "--metrics", metrics,
                   "--timeout-s", "30", "--no-progress", "--json", sweep_path}),
            0);
  const nlohmann::json sweep = ReadJson(sweep_path);
  ASSERT_EQ(sweep["runs"].size(), 2u);
  ASSERT_EQ(sweep["compare"].size(), 2u);
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(sweep["runs"][i]["summary"]["completed"], 4);
    EXPECT_EQ(sweep["compare"][i]["summary"]["completed"], 4);
  }
  ASSERT_EQ(sweep["server_metrics"].size(), 2u);
  // 4 requests x 4 tokens per sweep point, seen by the servers' counters;
  // the shared 32-token prefix is served from the prefix cache.
  EXPECT_EQ(sweep["server_metrics"][0]["delta"]["floe_generation_tokens_total"], 16.0);
  EXPECT_GT(sweep["server_metrics"][1]["prefix_hit_rate"].get<double>(), 0.0);
  std::remove(sweep_path.c_str());

  const int status = (*cluster)->Terminate(std::chrono::seconds(20));
  EXPECT_TRUE(WIFEXITED(status)) << "cluster did not exit on SIGTERM (status " << status << ")";
}

TEST(BenchIntegrationTest, NothingListeningEndsFastWithAPartialResult) {
  const std::string addr = "127.0.0.1:" + std::to_string(UnusedPort());
  const std::string json_path = TempPath("bench_dead");
  const auto start = std::chrono::steady_clock::now();
  // With --vocab-size the probe failure is only a warning: the load itself
  // must notice the dead server and stop.
  EXPECT_EQ(Bench({"--addr", addr, "--num-requests", "200", "--input-len", "8", "--output-len", "4",
                   "--vocab-size", "100", "--max-concurrency", "4", "--connect-timeout-s", "1", "--timeout-s", "5",
                   "--no-progress", "--json", json_path}),
            1);
  const nlohmann::json result = ReadJson(json_path);
  EXPECT_TRUE(result["aborted"].get<bool>());
  EXPECT_GT(result["summary"]["failed"].get<int>(), 0);
  EXPECT_LT(result["requests"].size(), 200u);
  EXPECT_GT(result["summary"]["failures_by_code"].value("UNAVAILABLE", 0), 0);
  std::remove(json_path.c_str());

  // Without it, the probe failure ends the run before anything is sent.
  EXPECT_EQ(Bench({"--addr", addr, "--num-requests", "5", "--connect-timeout-s", "1", "--no-progress", "--json",
                   json_path}),
            1);
  EXPECT_TRUE(ReadJson(json_path).contains("error"));
  std::remove(json_path.c_str());
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20));
}

TEST(BenchIntegrationTest, BadArgumentsAreUsageErrors) {
  EXPECT_EQ(Bench({"--num-requests", "5"}), 2);  // no --addr
  EXPECT_EQ(Bench({"--addr", "127.0.0.1:1", "--workload", "nope"}), 2);
  EXPECT_EQ(Bench({"--addr", "127.0.0.1:1", "--num-requests", "0"}), 2);
  EXPECT_EQ(Bench({"--addr", "127.0.0.1:1", "--sweep", "speed=1,2"}), 2);
  EXPECT_EQ(Bench({"--addr", "127.0.0.1:1", "--goodput", "ttft=5"}), 2);
  EXPECT_EQ(Bench({"--addr", "127.0.0.1:1", "--request-rate", "fast"}), 2);
}

}  // namespace
}  // namespace floe
