// API keys, tenants and rate limits through real processes on loopback: a
// router with --api-key-file refuses missing and wrong keys on gRPC and HTTP,
// keeps each tenant's cached prefixes to itself (vLLM's cache_salt, set from
// the tenant), and holds each tenant to its rate. Workers and the
// suffix-cache with --admin-key-file open their admin calls to admin keys
// only; gRPC reflection is off unless asked for.
#include <fstream>
#include <thread>

#include <nlohmann/json.hpp>

#include <grpcpp/generic/generic_stub.h>

#include "floe/v1/suffix_cache.grpc.pb.h"
#include "gtest/gtest.h"
#include "common/auth/api_keys.h"
#include "tests/common/http/http_test_client.h"
#include "tests/integration/local_cluster.h"

namespace floe::testing {
namespace {

using floe::v1::GenerateRequest;
using nlohmann::json;

std::string KeyFile() {
  const std::string path = ::testing::TempDir() + "/api_keys.txt";
  std::ofstream out(path);
  out << "# SHA-256 of the key, tenant\n"
      << Sha256Hex("key-a") << " team-a\n"
      << Sha256Hex("key-b") << " team-b\n"
      << Sha256Hex("key-root") << " ops admin\n";
  return path;
}

std::string HttpAddress(Subprocess& router) {
  for (const std::string& line : router.lines())
    if (line.rfind("http bound to ", 0) == 0) return line.substr(14);
  return "";
}

// A prompt of several full KV blocks, so a second run can hit the prefix cache.
GenerateRequest LongPrompt(int max_tokens = 2) {
  GenerateRequest r;
  std::string text;
  for (int i = 0; i < 40; ++i) text += "shared context line " + std::to_string(i) + ". ";
  r.set_text(text);
  r.mutable_stopping()->set_max_tokens(max_tokens);
  return r;
}

Generation As(LocalCluster& cluster, const std::string& key, const GenerateRequest& request) {
  auto stub = cluster.RouterStub();
  grpc::ClientContext context;
  if (!key.empty()) context.AddMetadata("authorization", "Bearer " + key);
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  Generation g;
  auto reader = stub->Generate(&context, request);
  floe::v1::GenerateResponse response;
  while (reader->Read(&response)) {
    if (response.has_chunk()) g.token_ids.insert(g.token_ids.end(), response.chunk().token_ids().begin(),
                                                 response.chunk().token_ids().end());
    if (response.has_complete()) g.complete = response.complete();
  }
  g.status = reader->Finish();
  return g;
}

TEST(ApiKeysClusterTest, KeysTenantsAndCachedPrefixes) {
  LocalCluster cluster(1, {}, {"--api-key-file", KeyFile(), "--http-port", "0"});
  ASSERT_TRUE(cluster.ok());
  // Refused without a key or with a wrong one; model metadata stays open.
  EXPECT_EQ(As(cluster, "", LongPrompt()).status.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  Generation wrong = As(cluster, "key-c", LongPrompt());
  EXPECT_EQ(wrong.status.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(wrong.status.error_message().find("key-c"), std::string::npos);
  {
    auto stub = cluster.RouterStub();
    grpc::ClientContext context;
    floe::v1::ModelInfo info;
    EXPECT_TRUE(stub->GetModelInfo(&context, floe::v1::GetModelInfoRequest(), &info).ok());
  }
  const std::string http = HttpAddress(cluster.router());
  const std::string body = R"({"prompt": "hi", "max_tokens": 2})";
  HttpResult no_key = HttpRequest(http, "POST", "/v1/completions", body);
  EXPECT_EQ(no_key.status, 401) << no_key.body;
  EXPECT_EQ(json::parse(no_key.body)["error"]["code"], "invalid_api_key");
  EXPECT_EQ(HttpRequest(http, "POST", "/v1/completions", body, {{"Authorization", "Bearer key-b"}}).status, 200);

  // Tenant A's prompt is cached for A, never for B (and B's own run is then
  // cached for B).
  Generation a1 = As(cluster, "key-a", LongPrompt());
  ASSERT_TRUE(a1.status.ok()) << a1.status.error_message();
  Generation a2 = As(cluster, "key-a", LongPrompt());
  ASSERT_TRUE(a2.status.ok());
  EXPECT_GT(a2.complete.usage().cached_prompt_tokens(), 0) << "the same tenant reuses its prefix";
  Generation b1 = As(cluster, "key-b", LongPrompt());
  ASSERT_TRUE(b1.status.ok());
  EXPECT_EQ(b1.complete.usage().cached_prompt_tokens(), 0) << "another tenant's cached prefix leaked";
  Generation b2 = As(cluster, "key-b", LongPrompt());
  EXPECT_GT(b2.complete.usage().cached_prompt_tokens(), 0);
  // A client's own cache_salt only subdivides its tenant's cache.
  GenerateRequest salted = LongPrompt();
  salted.set_cache_salt("team-a");  // naming the other tenant gains nothing
  EXPECT_EQ(As(cluster, "key-b", salted).complete.usage().cached_prompt_tokens(), 0);
  // Same outputs whatever the tenant (greedy).
  EXPECT_EQ(a1.token_ids, b1.token_ids);
}

// One request per 5 s: the requests that must find the bucket empty follow
// the one that emptied it within a second on an idle host, and well within
// 5 s on a busy one (at 1 rps a slow request let the bucket refill first).
TEST(ApiKeysClusterTest, RateLimitsPerTenant) {
  LocalCluster cluster(1, {}, {"--api-key-file", KeyFile(), "--http-port", "0", "--rate-limit-rps", "0.2"});
  ASSERT_TRUE(cluster.ok());
  GenerateRequest r = LongPrompt(1);
  EXPECT_TRUE(As(cluster, "key-a", r).status.ok());
  Generation limited = As(cluster, "key-a", r);
  EXPECT_EQ(limited.status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_NE(limited.status.error_message().find("retry in"), std::string::npos) << limited.status.error_message();
  EXPECT_TRUE(As(cluster, "key-b", r).status.ok()) << "another tenant is not held back";
  HttpResult http = HttpRequest(HttpAddress(cluster.router()), "POST", "/v1/completions",
                                R"({"prompt": "x", "max_tokens": 1})", {{"Authorization", "Bearer key-b"}});
  EXPECT_EQ(http.status, 429) << http.body;
  EXPECT_GE(std::stoi(http.Header("retry-after").empty() ? "0" : http.Header("retry-after")), 1);
  EXPECT_EQ(json::parse(http.body)["error"]["type"], "rate_limit_exceeded");
  std::this_thread::sleep_for(std::chrono::milliseconds(5200));
  EXPECT_TRUE(As(cluster, "key-a", r).status.ok()) << "the bucket refills";
}

template <class Call>
grpc::Status WithKey(const std::string& key, Call call) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  if (!key.empty()) context.AddMetadata("authorization", "Bearer " + key);
  return call(&context);
}

TEST(ApiKeysClusterTest, AdminCallsNeedAnAdminKey) {
  LocalCluster cluster(1, {"--admin-key-file", KeyFile()});
  ASSERT_TRUE(cluster.ok());
  auto worker = cluster.WorkerStub(0);
  floe::v1::AbortRequest abort;
  abort.set_request_id("nothing-running");
  floe::v1::AbortResponse aborted;
  auto abort_as = [&](const std::string& key) {
    return WithKey(key, [&](grpc::ClientContext* c) { return worker->Abort(c, abort, &aborted); });
  };
  EXPECT_EQ(abort_as("").error_code(), grpc::StatusCode::UNAUTHENTICATED);
  grpc::Status user = abort_as("key-a");
  EXPECT_EQ(user.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_NE(user.error_message().find("Worker.Abort needs an admin key"), std::string::npos) << user.error_message();
  EXPECT_TRUE(abort_as("key-root").ok());
  // The router's own calls to the worker need no admin key.
  Generation g = floe::testing::Generate(*cluster.RouterStub(), LongPrompt());
  EXPECT_TRUE(g.status.ok()) << g.status.error_message();

  auto spawned = Subprocess::Spawn({BinaryPath("floe-suffix-cache"), "--port", "0", "--metrics-port", "-1",
                                    "--admin-key-file", KeyFile()});
  ASSERT_TRUE(spawned.ok());
  auto address = (*spawned)->WaitForLine("suffix-cache listening on ", std::chrono::seconds(60));
  ASSERT_TRUE(address.ok());
  auto cache = floe::v1::SuffixCache::NewStub(grpc::CreateChannel(*address, grpc::InsecureChannelCredentials()));
  floe::v1::SuffixClearNamespaceRequest clear;
  clear.set_namespace_("team-a");
  floe::v1::SuffixClearNamespaceResponse cleared;
  auto clear_as = [&](const std::string& key) {
    return WithKey(key, [&](grpc::ClientContext* c) { return cache->ClearNamespace(c, clear, &cleared); });
  };
  EXPECT_EQ(clear_as("").error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_EQ(clear_as("key-b").error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_TRUE(clear_as("key-root").ok());
  floe::v1::SuffixSnapshotResponse snapshot;
  EXPECT_EQ(WithKey("key-a", [&](grpc::ClientContext* c) {
              return cache->Snapshot(c, floe::v1::SuffixSnapshotRequest(), &snapshot);
            }).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  // Non-admin calls stay open to the workers.
  floe::v1::SuffixStats stats;
  EXPECT_TRUE(WithKey("", [&](grpc::ClientContext* c) {
                return cache->GetStats(c, floe::v1::SuffixStatsRequest(), &stats);
              }).ok());
  (*spawned)->Terminate(std::chrono::seconds(10));
}

// A reflection call over the generic stub: UNIMPLEMENTED where it is off.
grpc::StatusCode ReflectionStatus(const std::string& address) {
  auto channel = grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
  grpc::GenericStub stub(channel);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  grpc::CompletionQueue cq;
  auto call = stub.PrepareCall(&context, "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", &cq);
  call->StartCall(reinterpret_cast<void*>(1));
  void* tag;
  bool ok;
  cq.Next(&tag, &ok);
  call->WritesDone(reinterpret_cast<void*>(2));
  cq.Next(&tag, &ok);
  grpc::Status status;
  call->Finish(&status, reinterpret_cast<void*>(3));
  while (cq.Next(&tag, &ok) && tag != reinterpret_cast<void*>(3)) {
  }
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
  return status.error_code();
}

TEST(ApiKeysClusterTest, ReflectionIsOffUnlessAskedFor) {
  LocalCluster off(1);
  ASSERT_TRUE(off.ok());
  EXPECT_EQ(ReflectionStatus(off.router_address()), grpc::StatusCode::UNIMPLEMENTED);
  EXPECT_EQ(ReflectionStatus(off.worker_addresses()[0]), grpc::StatusCode::UNIMPLEMENTED);
  LocalCluster on(1, {"--reflection"}, {"--reflection"});
  ASSERT_TRUE(on.ok());
  // An empty request stream: the service is there and ends the call OK.
  EXPECT_EQ(ReflectionStatus(on.router_address()), grpc::StatusCode::OK);
  EXPECT_EQ(ReflectionStatus(on.worker_addresses()[0]), grpc::StatusCode::OK);
}

}  // namespace
}  // namespace floe::testing
