// The floe-suffix-cache binary: listening line, serving, SIGTERM writes a
// snapshot that the next start restores; a corrupt snapshot is reported.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/metrics/http_get.h"
#include "gtest/gtest.h"
#include "services/suffix_cache/client/suffix_cache_client.h"

namespace floe::suffix_cache {
namespace {

struct Child {
  pid_t pid = -1;
  std::string address;
  std::string metrics_url;  // with --metrics-port
};

// Starts the binary with stdout on a pipe (for the listening line) and stderr
// into `log`.
Child Launch(const std::vector<std::string>& args, const std::string& log, bool metrics = false) {
  const char* bin_dir = std::getenv("FLOE_BINARY_DIR");
  const std::string bin = std::string(bin_dir ? bin_dir : "build") + "/bin/floe-suffix-cache";
  int fds[2];
  if (pipe(fds) != 0) return {};
  Child c;
  // posix_spawn, not fork: it runs no pthread_atfork handlers, which gRPC's
  // threads in this process do not survive.
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 1);
  posix_spawn_file_actions_addopen(&actions, 2, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addclose(&actions, fds[0]);
  posix_spawn_file_actions_addclose(&actions, fds[1]);
  std::vector<char*> argv;
  argv.push_back(const_cast<char*>(bin.c_str()));
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  if (posix_spawn(&c.pid, bin.c_str(), &actions, nullptr, argv.data(), environ) != 0) c.pid = -1;
  posix_spawn_file_actions_destroy(&actions);
  close(fds[1]);
  FILE* out = fdopen(fds[0], "r");
  char line[256] = {0};
  if (std::fgets(line, sizeof(line), out) != nullptr) {
    const std::string s(line);
    const std::string prefix = "suffix-cache listening on ";
    if (s.rfind(prefix, 0) == 0) c.address = s.substr(prefix.size(), s.size() - prefix.size() - 1);
  }
  if (metrics && std::fgets(line, sizeof(line), out) != nullptr) {
    const std::string s(line);
    const std::string prefix = "metrics suffix-cache ";
    if (s.rfind(prefix, 0) == 0) c.metrics_url = s.substr(prefix.size(), s.size() - prefix.size() - 1);
  }
  std::fclose(out);
  return c;
}

int Terminate(const Child& c) {
  kill(c.pid, SIGTERM);
  int status = 0;
  waitpid(c.pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::unique_ptr<SuffixCacheClient> Connect(const std::string& address) {
  ClientOptions o;
  o.addresses = {address};
  o.call_deadline = std::chrono::milliseconds(2000);
  o.step_deadline = std::chrono::milliseconds(2000);
  return std::move(SuffixCacheClient::Create(o)).value();
}

// The server answers UNAVAILABLE until it has restored; retry briefly.
absl::StatusOr<floe::v1::SuffixStats> StatsWhenReady(SuffixCacheClient& client) {
  absl::StatusOr<floe::v1::SuffixStats> s;
  for (int i = 0; i < 100; ++i) {
    s = client.GetStats(0);
    if (s.ok()) break;
    usleep(20000);
  }
  return s;
}

TEST(SuffixCacheBinaryTest, SigtermSnapshotsAndRestartRestores) {
  const std::string dir = ::testing::TempDir() + "/suffix_binary";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::vector<std::string> args = {"--port", "0", "--snapshot-dir", dir + "/snap", "--vocab-size", "1000"};
  Child c = Launch(args, dir + "/log1.txt");
  ASSERT_FALSE(c.address.empty()) << ReadFile(dir + "/log1.txt");
  {
    auto client = Connect(c.address);
    ASSERT_TRUE(StatsWhenReady(*client).ok());
    ASSERT_TRUE(client->StartRequest("team", "r1", {1, 2, 3}).ok());
    floe::v1::SuffixStepRequest step;
    auto* e = step.add_entries();
    e->set_namespace_("team");
    e->set_request_id("r1");
    for (int t : {10, 11, 12, 13}) e->add_appended(t);
    floe::v1::SuffixStepResponse resp = client->Step(step);
    ASSERT_EQ(resp.results(0).code(), 0) << resp.results(0).error();
    ASSERT_TRUE(client->EndRequest("team", "r1").ok());
  }
  EXPECT_EQ(Terminate(c), 0);
  EXPECT_TRUE(std::filesystem::exists(dir + "/snap/suffix-cache.snap"));
  EXPECT_NE(ReadFile(dir + "/log1.txt").find("snapshot_written"), std::string::npos);

  Child again = Launch(args, dir + "/log2.txt");
  ASSERT_FALSE(again.address.empty());
  {
    auto client = Connect(again.address);
    auto stats = StatsWhenReady(*client);
    ASSERT_TRUE(stats.ok()) << stats.status();
    EXPECT_EQ(stats->cached_responses(), 1);
    EXPECT_EQ(stats->cached_tokens(), 4);
  }
  EXPECT_EQ(Terminate(again), 0);
  // Restored from the tree image the snapshot carries, not rebuilt.
  const std::string restored = ReadFile(dir + "/log2.txt");
  EXPECT_NE(restored.find("\"from_image\":1"), std::string::npos) << restored;
  EXPECT_NE(restored.find("\"rebuilt\":0"), std::string::npos) << restored;

  // A corrupt snapshot: reported in the log, skipped, the service starts empty.
  std::ofstream(dir + "/snap/suffix-cache.snap", std::ios::trunc) << "FLOESUFX garbage";
  Child third = Launch(args, dir + "/log3.txt");
  ASSERT_FALSE(third.address.empty());
  {
    auto client = Connect(third.address);
    auto stats = StatsWhenReady(*client);
    ASSERT_TRUE(stats.ok()) << stats.status();
    EXPECT_EQ(stats->cached_responses(), 0);
  }
  EXPECT_EQ(Terminate(third), 0);
  EXPECT_NE(ReadFile(dir + "/log3.txt").find("snapshot_corrupt"), std::string::npos);
}

TEST(SuffixCacheBinaryTest, MetricsEndpoint) {
  const std::string dir = ::testing::TempDir() + "/suffix_metrics";
  std::filesystem::create_directories(dir);
  Child c = Launch({"--port", "0", "--metrics-port", "0"}, dir + "/log.txt", /*metrics=*/true);
  ASSERT_FALSE(c.address.empty());
  ASSERT_FALSE(c.metrics_url.empty());
  {
    auto client = Connect(c.address);
    ASSERT_TRUE(StatsWhenReady(*client).ok());
    ASSERT_TRUE(client->StartRequest("", "r", {1, 2}).ok());
    floe::v1::SuffixStepRequest step;
    auto* e = step.add_entries();
    e->set_request_id("r");
    e->add_appended(5);
    e->set_speculate(true);
    ASSERT_EQ(client->Step(step).results(0).code(), 0);
  }
  // Scraped in process: forking (curl via std::system) while gRPC threads run
  // trips gRPC's fork handlers.
  absl::StatusOr<std::string> scraped = HttpGet(c.metrics_url);
  ASSERT_TRUE(scraped.ok()) << scraped.status();
  const std::string text = *scraped;
  EXPECT_NE(text.find("floe_suffix_cache_cached_responses 1"), std::string::npos) << text.substr(0, 2000);
  EXPECT_NE(text.find("floe_suffix_cache_bytes"), std::string::npos);
  EXPECT_NE(text.find("floe_suffix_cache_rpc_latency_seconds_count{method=\"Step\"} 1"), std::string::npos);
  EXPECT_NE(text.find("floe_suffix_cache_step_phase_seconds_count{phase=\"appends_local_drafts\"} 1"), std::string::npos);
  EXPECT_NE(text.find("floe_suffix_cache_step_phase_seconds_count{phase=\"global_drafts\"} 1"), std::string::npos);
  EXPECT_NE(text.find("floe_suffix_cache_speculate_queries_total 1"), std::string::npos);
  EXPECT_EQ(Terminate(c), 0);
}

// --request-lease-s: a request nobody calls about (its worker was killed)
// expires; the log says so and the metrics count it. --max-bytes refuses a
// start beyond it.
TEST(SuffixCacheBinaryTest, LeaseExpiresAbandonedRequestsAndTheBudgetRefusesStarts) {
  const std::string dir = ::testing::TempDir() + "/suffix_lease";
  std::filesystem::create_directories(dir);
  Child c = Launch({"--port", "0", "--metrics-port", "0", "--request-lease-s", "0.2", "--max-bytes", "1000000"},
                   dir + "/log.txt", /*metrics=*/true);
  ASSERT_FALSE(c.address.empty());
  ASSERT_FALSE(c.metrics_url.empty());
  {
    auto client = Connect(c.address);
    ASSERT_TRUE(StatsWhenReady(*client).ok());
    std::vector<int32_t> prompt(20000);
    for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<int32_t>(i);
    const absl::Status refused = client->StartRequest("", "too-big", prompt);
    EXPECT_EQ(refused.code(), absl::StatusCode::kResourceExhausted) << refused;
    EXPECT_NE(refused.message().find("--max-bytes 1000000"), std::string::npos) << refused;
    ASSERT_TRUE(client->StartRequest("", "orphan", {1, 2, 3}).ok());
    // Deadline-bounded: the reaper runs every 50 ms after a 200 ms lease.
    absl::StatusOr<floe::v1::SuffixStats> stats;
    for (int i = 0; i < 1000; ++i) {
      stats = client->GetStats(0);
      if (stats.ok() && stats->active_requests() == 0) break;
      usleep(10000);
    }
    ASSERT_TRUE(stats.ok()) << stats.status();
    EXPECT_EQ(stats->active_requests(), 0);
  }
  absl::StatusOr<std::string> scraped = HttpGet(c.metrics_url);
  ASSERT_TRUE(scraped.ok()) << scraped.status();
  EXPECT_NE(scraped->find("floe_suffix_cache_expired_requests_total 1"), std::string::npos) << *scraped;
  EXPECT_NE(scraped->find("floe_suffix_cache_rejected_starts_total 1"), std::string::npos);
  EXPECT_NE(scraped->find("floe_suffix_cache_active_request_bytes 0"), std::string::npos);
  EXPECT_NE(scraped->find("floe_suffix_cache_max_bytes 1000000"), std::string::npos);
  EXPECT_EQ(Terminate(c), 0);
  const std::string log = ReadFile(dir + "/log.txt");
  EXPECT_NE(log.find("\"event\":\"request_expired\""), std::string::npos) << log;
  EXPECT_NE(log.find("\"request_id\":\"orphan\""), std::string::npos) << log;
}

// Exit status of floe-suffix-cache with `args` (output discarded).
int RunBinary(const std::string& args) {
  const char* bin_dir = std::getenv("FLOE_BINARY_DIR");
  const std::string cmd =
      std::string(bin_dir ? bin_dir : "build") + "/bin/floe-suffix-cache " + args + " > /dev/null 2>&1";
  const int status = std::system(cmd.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST(SuffixCacheBinaryTest, HelpExitsZero) { EXPECT_EQ(RunBinary("--help"), 0); }

TEST(SuffixCacheBinaryTest, UnknownEvictionPolicyIsAUsageError) {
  EXPECT_EQ(RunBinary("--eviction lru --port 0"), 2);
}

TEST(SuffixCacheBinaryTest, NegativeImageBoundIsAUsageError) {
  EXPECT_EQ(RunBinary("--snapshot-image-max-bytes-per-token -1 --port 0"), 2);
}

TEST(SuffixCacheBinaryTest, NegativeLeaseOrPromptCapIsAUsageError) {
  EXPECT_EQ(RunBinary("--request-lease-s -1 --port 0"), 2);
  EXPECT_EQ(RunBinary("--request-lease-s nan --port 0"), 2);
  EXPECT_EQ(RunBinary("--max-prompt-index-tokens -1 --port 0"), 2);
}

}  // namespace
}  // namespace floe::suffix_cache
