// Fault: a client that skips the router (issue 41, item 4).
//
// Workers and the suffix cache once served whoever called them: a client
// could call Worker.Generate with another tenant's cache_salt and learn from
// the cached-token count whether that tenant had sent a prompt, start a
// suffix-cache request in another tenant's namespace and read its output
// back as drafts, and list every tenant through GetStats. A real cluster on
// loopback, every service started with the same --internal-key-file: the
// router with --api-key-file (tenants team-a and team-b), one worker
// drafting with --speculative suffix from a floe-suffix-cache that also has
// an --admin-key-file (team-a's key, and an admin key). What is promised:
// - through the router the cluster serves both tenants end to end, with
//   speculation on (the router's calls to the worker and the worker's calls
//   to the cache carry the key: the cache holds each tenant's responses in
//   its namespace), and greedy outputs repeat exactly;
// - a direct Worker.Generate (even with a tenant's API key or another
//   tenant's cache_salt) and a direct GetModelInfo without the internal key
//   are refused UNAUTHENTICATED; with the key they are served; the worker's
//   health stays open;
// - a direct StartRequest, Step and GetStats on the suffix cache without the
//   key are refused; with it StartRequest is served;
// - GetStats with team-a's key shows team-a's namespaces only; the admin key
//   and the internal key show every namespace.
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/auth/api_keys.h"
#include "common/rpc/liveness_watchdog.h"
#include "gtest/gtest.h"
#include "tests/faults/fault_support.h"

namespace floe::testing {
namespace {

namespace fs = std::filesystem;

constexpr int kMaxTokens = 24;

// The run's files: the internal key (random), the router's API keys and the
// suffix cache's admin keys.
class KeyFiles {
 public:
  KeyFiles() : dir_(fs::temp_directory_path() / absl::StrCat("floe_faults_trust_", getpid())) {
    fs::create_directories(dir_);
    std::random_device entropy;
    internal_key_ = absl::StrFormat("%08x%08x%08x%08x", entropy(), entropy(), entropy(), entropy());
    Write("internal.key", internal_key_ + "\n");
    Write("api.keys", absl::StrCat(Sha256Hex("key-a"), " team-a\n", Sha256Hex("key-b"), " team-b\n"));
    Write("cache.keys", absl::StrCat(Sha256Hex("key-a"), " team-a\n", Sha256Hex("root-key"), " ops admin\n"));
  }
  ~KeyFiles() {
    std::error_code ignored;
    fs::remove_all(dir_, ignored);
  }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  const std::string& internal_key() const { return internal_key_; }

 private:
  void Write(const std::string& name, const std::string& text) { std::ofstream(path(name)) << text; }
  fs::path dir_;
  std::string internal_key_;
};

std::unique_ptr<grpc::ClientContext> Context(const std::string& bearer = "") {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  if (!bearer.empty()) context->AddMetadata("authorization", "Bearer " + bearer);
  return context;
}

// A worker's Generate, read to its end.
struct Direct {
  grpc::Status status;
  int tokens = 0;
};
Direct WorkerGenerate(floe::v1::Worker::Stub& stub, const std::string& bearer, const std::string& salt) {
  floe::v1::GenerateRequest request;
  for (int32_t id : {128000, 9906, 11, 1917, 13}) request.mutable_token_ids()->add_ids(id);
  request.mutable_stopping()->set_max_tokens(4);
  request.set_cache_salt(salt);
  auto context = Context(bearer);
  auto reader = stub.Generate(context.get(), request);
  Direct out;
  floe::v1::GenerateResponse response;
  while (reader->Read(&response)) out.tokens += response.chunk().token_ids_size();
  out.status = reader->Finish();
  return out;
}

Generation RouterGenerate(floe::v1::Floe::Stub& stub, const std::string& api_key, const std::string& text) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  context.AddMetadata("authorization", "Bearer " + api_key);
  Generation out;
  auto reader = stub.Generate(&context, GreedyRequest(text, kMaxTokens));
  floe::v1::GenerateResponse response;
  while (reader->Read(&response)) {
    out.token_ids.insert(out.token_ids.end(), response.chunk().token_ids().begin(), response.chunk().token_ids().end());
    out.text += response.chunk().text();
  }
  out.status = reader->Finish();
  return out;
}

std::vector<std::string> Namespaces(const floe::v1::SuffixStats& stats) {
  std::vector<std::string> out;
  for (const auto& n : stats.namespaces()) out.push_back(n.namespace_());
  std::sort(out.begin(), out.end());
  return out;
}

TEST(InternalTrustFaultTest, OnlyFloesOwnServicesGetPastTheRouter) {
  const KeyFiles keys;
  auto spawned = Subprocess::Spawn({BinaryPath("floe-suffix-cache"), "--host", "127.0.0.1", "--port", "0",
                                    "--metrics-port", "-1", "--internal-key-file", keys.path("internal.key"),
                                    "--admin-key-file", keys.path("cache.keys")});
  ASSERT_TRUE(spawned.ok()) << spawned.status();
  std::unique_ptr<Subprocess> cache_process = std::move(spawned).value();
  auto cache_address = cache_process->WaitForLine("suffix-cache listening on ", std::chrono::seconds(60));
  ASSERT_TRUE(cache_address.ok()) << cache_address.status();
  // Ready only once the router's GetLoad and GetModelInfo reached the worker:
  // the router sends the key.
  LocalCluster cluster(1,
                       {"--speculative", "suffix", "--suffix-cache", *cache_address, "--num-speculative-tokens", "4",
                        "--internal-key-file", keys.path("internal.key")},
                       {"--internal-key-file", keys.path("internal.key"), "--api-key-file", keys.path("api.keys")});
  ASSERT_TRUE(cluster.ok()) << "the router never saw its worker healthy";
  auto router = cluster.RouterStub();
  auto worker = cluster.WorkerStub(0);
  auto cache = floe::v1::SuffixCache::NewStub(grpc::CreateChannel(*cache_address, grpc::InsecureChannelCredentials()));

  // End to end through the router: each tenant twice (the second run drafts
  // from the first one's cached response); greedy outputs repeat exactly.
  const std::string prompt = "List the files, run the tests, report. Tool output: ok ok ok ok. Next step?";
  for (const char* api_key : {"key-a", "key-b"}) {
    const Generation first = RouterGenerate(*router, api_key, prompt);
    ASSERT_TRUE(first.status.ok()) << api_key << ": " << first.status.error_message();
    EXPECT_EQ(first.token_ids.size(), static_cast<size_t>(kMaxTokens)) << api_key;
    const Generation second = RouterGenerate(*router, api_key, prompt);
    ASSERT_TRUE(second.status.ok()) << api_key << ": " << second.status.error_message();
    EXPECT_EQ(second.token_ids, first.token_ids) << api_key << ": speculation is lossless";
    EXPECT_EQ(second.text, first.text) << api_key;
  }
  // The worker's Start/End calls reached the cache (they are sent after the
  // response, on its lifecycle thread): both tenants' responses are cached,
  // each in its own namespace.
  floe::v1::SuffixStats all;
  ASSERT_TRUE(WaitFor(
      [&] {
        all.Clear();
        return cache->GetStats(Context(keys.internal_key()).get(), floe::v1::SuffixStatsRequest(), &all).ok() &&
               all.cached_responses() == 4 && all.active_requests() == 0;
      },
      std::chrono::seconds(10)))
      << all.DebugString();
  EXPECT_EQ(Namespaces(all), (std::vector<std::string>{"team-a", "team-b"}));
  EXPECT_GT(all.steps_total(), 0) << "the worker's Steps were authorized";
  std::printf("[internal_trust] cache: %lld steps, %lld drafts\n", static_cast<long long>(all.steps_total()),
              static_cast<long long>(all.drafts_total()));

  // Direct to the worker: refused without the internal key, whatever else
  // the caller holds; served with it. Health stays open.
  for (const std::string& bearer :
       {std::string(), std::string("key-a"), std::string("root-key"), keys.internal_key() + "x"}) {
    const Direct refused = WorkerGenerate(*worker, bearer, "team-a");  // team-a's prefix-cache salt
    EXPECT_EQ(refused.status.error_code(), grpc::StatusCode::UNAUTHENTICATED)
        << (bearer.empty() ? "no key" : bearer) << ": " << refused.status.error_message();
    EXPECT_EQ(refused.tokens, 0);
  }
  floe::v1::ModelInfo info;
  EXPECT_EQ(worker->GetModelInfo(Context().get(), floe::v1::GetModelInfoRequest(), &info).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  const Direct served = WorkerGenerate(*worker, keys.internal_key(), "");
  EXPECT_TRUE(served.status.ok()) << served.status.error_message();
  EXPECT_EQ(served.tokens, 4);
  EXPECT_TRUE(worker->GetModelInfo(Context(keys.internal_key()).get(), floe::v1::GetModelInfoRequest(), &info).ok());
  const grpc::Status health = CheckHealth(
      grpc::CreateChannel(cluster.worker_addresses()[0], grpc::InsecureChannelCredentials()), std::chrono::seconds(5));
  EXPECT_TRUE(health.ok()) << "health needs no key: " << health.error_message();

  // Direct to the suffix cache: the attack's calls are refused without the key.
  floe::v1::SuffixStartRequest start;
  start.set_namespace_("team-b");
  start.set_request_id("probe");
  for (int32_t id : {1, 2, 3}) start.add_prompt(id);
  floe::v1::SuffixStartResponse started;
  for (const std::string& bearer : {std::string(), std::string("key-a"), std::string("root-key")}) {
    EXPECT_EQ(cache->StartRequest(Context(bearer).get(), start, &started).error_code(),
              grpc::StatusCode::UNAUTHENTICATED)
        << (bearer.empty() ? "no key" : bearer);
  }
  floe::v1::SuffixStepRequest step;
  auto* entry = step.add_entries();
  entry->set_namespace_("team-b");
  entry->set_request_id("probe");
  entry->set_speculate(true);
  step.mutable_params()->set_max_spec_tokens(16);
  floe::v1::SuffixStepResponse drafts;
  EXPECT_EQ(cache->Step(Context().get(), step, &drafts).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(drafts.results_size(), 0);
  floe::v1::SuffixStats stats;
  EXPECT_EQ(cache->GetStats(Context().get(), floe::v1::SuffixStatsRequest(), &stats).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(stats.namespaces_size(), 0);
  EXPECT_TRUE(cache->StartRequest(Context(keys.internal_key()).get(), start, &started).ok());
  floe::v1::SuffixAbortRequest abort;
  abort.set_namespace_("team-b");
  abort.set_request_id("probe");
  floe::v1::SuffixAbortResponse aborted;
  EXPECT_TRUE(cache->AbortRequest(Context(keys.internal_key()).get(), abort, &aborted).ok());

  // GetStats: a tenant sees its own namespaces; the admin sees both.
  floe::v1::SuffixStats a;
  ASSERT_TRUE(cache->GetStats(Context("key-a").get(), floe::v1::SuffixStatsRequest(), &a).ok());
  EXPECT_EQ(Namespaces(a), (std::vector<std::string>{"team-a"}));
  EXPECT_EQ(a.cached_responses(), 2);
  floe::v1::SuffixStats admin;
  ASSERT_TRUE(cache->GetStats(Context("root-key").get(), floe::v1::SuffixStatsRequest(), &admin).ok());
  // (and "default", where the direct call above ran)
  const std::vector<std::string> seen = Namespaces(admin), tenants = {"team-a", "team-b"};
  EXPECT_TRUE(std::includes(seen.begin(), seen.end(), tenants.begin(), tenants.end())) << admin.DebugString();

  // And the cluster still serves through the router.
  const Generation after = RouterGenerate(*router, "key-a", "One more request after the probes.");
  EXPECT_TRUE(after.status.ok()) << after.status.error_message();
  cache_process->Terminate(std::chrono::seconds(10));
}

}  // namespace
}  // namespace floe::testing
