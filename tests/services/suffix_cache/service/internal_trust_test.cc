// The suffix-cache service under internal trust, on a real loopback server:
// without the internal key a caller can neither start, step, end nor abort a
// request (so it cannot read another tenant's responses back as drafts) nor
// list the namespaces; a tenant's key from --admin-key-file reads GetStats
// of its own namespaces only (the router's mapping: TENANT, TENANT/...),
// an admin key and the internal key read everything; the admin calls need
// an admin key, else the internal key. Without a trust GetStats stays open.
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <optional>

#include "common/auth/api_keys.h"
#include "common/auth/internal_trust.h"
#include "common/rpc/server_runner.h"
#include "gtest/gtest.h"
#include "services/suffix_cache/suffix_cache_service.h"

namespace floe::suffix_cache {
namespace {

constexpr char kKey[] = "suffix-cache-test-internal-key-0123";

struct Server {
  Server(std::shared_ptr<const InternalTrust> trust, const ApiKeys* admin_keys)
      : store(StoreOptions{}), service(&store, ServiceLimits{}, std::move(trust)) {
    if (admin_keys) service.SetAdminKeys(admin_keys);
    auto started = ServerRunner::Start({}, {&service});
    EXPECT_TRUE(started.ok()) << started.status();
    runner = std::move(started).value();
    service.SetAccepting(true);
    runner->SetServing(true);
    stub = floe::v1::SuffixCache::NewStub(grpc::CreateChannel(runner->address(), grpc::InsecureChannelCredentials()));
  }
  ~Server() { runner->Shutdown(std::chrono::milliseconds(100)); }

  SuffixCacheStore store;
  SuffixCacheService service;
  std::unique_ptr<ServerRunner> runner;
  std::unique_ptr<floe::v1::SuffixCache::Stub> stub;
};

// How a call authenticates: the internal key (Attach), a literal header, or nothing.
struct Caller {
  const InternalTrust* trust = nullptr;
  std::string authorization;
  std::unique_ptr<grpc::ClientContext> Context() const {
    auto context = std::make_unique<grpc::ClientContext>();
    context->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    if (trust) trust->Attach(context.get());
    if (!authorization.empty()) context->AddMetadata("authorization", authorization);
    return context;
  }
};

grpc::Status Start(Server& s, const Caller& c, const std::string& ns, const std::string& id) {
  floe::v1::SuffixStartRequest req;
  req.set_namespace_(ns);
  req.set_request_id(id);
  for (int32_t t : {1, 2, 3, 4}) req.add_prompt(t);
  floe::v1::SuffixStartResponse resp;
  return s.stub->StartRequest(c.Context().get(), req, &resp);
}

grpc::Status Step(Server& s, const Caller& c, const std::string& ns, const std::string& id,
                  floe::v1::SuffixStepResponse* resp) {
  floe::v1::SuffixStepRequest req;
  auto* e = req.add_entries();
  e->set_namespace_(ns);
  e->set_request_id(id);
  for (int32_t t : {5, 6, 7, 8, 9, 10}) e->add_appended(t);
  e->set_speculate(true);
  req.mutable_params()->set_max_spec_tokens(8);
  return s.stub->Step(c.Context().get(), req, resp);
}

grpc::Status End(Server& s, const Caller& c, const std::string& ns, const std::string& id) {
  floe::v1::SuffixEndRequest req;
  req.set_namespace_(ns);
  req.set_request_id(id);
  floe::v1::SuffixEndResponse resp;
  return s.stub->EndRequest(c.Context().get(), req, &resp);
}

grpc::Status Abort(Server& s, const Caller& c, const std::string& ns, const std::string& id) {
  floe::v1::SuffixAbortRequest req;
  req.set_namespace_(ns);
  req.set_request_id(id);
  floe::v1::SuffixAbortResponse resp;
  return s.stub->AbortRequest(c.Context().get(), req, &resp);
}

grpc::Status Stats(Server& s, const Caller& c, floe::v1::SuffixStats* out) {
  return s.stub->GetStats(c.Context().get(), floe::v1::SuffixStatsRequest(), out);
}

std::vector<std::string> Names(const floe::v1::SuffixStats& stats) {
  std::vector<std::string> out;
  for (const auto& n : stats.namespaces()) out.push_back(n.namespace_());
  std::sort(out.begin(), out.end());
  return out;
}

class SuffixCacheInternalTrustTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto trust = InternalTrust::FromKey(kKey);
    ASSERT_TRUE(trust.ok()) << trust.status();
    trust_ = *trust;
    internal_.trust = trust_.get();
    auto keys = ApiKeys::Parse(Sha256Hex("root-key") + " ops admin\n" + Sha256Hex("key-a") + " team-a\n" +
                               Sha256Hex("key-b") + " team-b\n");
    ASSERT_TRUE(keys.ok()) << keys.status();
    keys_ = *std::move(keys);
  }
  // One ended response in each of `namespaces`, through the internal key.
  void Fill(Server& s, const std::vector<std::string>& namespaces) {
    for (const std::string& ns : namespaces) {
      ASSERT_TRUE(Start(s, internal_, ns, "r-" + ns).ok()) << ns;
      floe::v1::SuffixStepResponse resp;
      ASSERT_TRUE(Step(s, internal_, ns, "r-" + ns, &resp).ok()) << ns;
      ASSERT_TRUE(End(s, internal_, ns, "r-" + ns).ok()) << ns;
    }
  }

  std::shared_ptr<const InternalTrust> trust_;
  std::optional<ApiKeys> keys_;
  Caller internal_;  // sends trust_'s key
};

TEST_F(SuffixCacheInternalTrustTest, EngineCallsNeedTheInternalKey) {
  Server s(trust_, &*keys_);
  Fill(s, {"team-b"});
  // The attack: start a request in another tenant's namespace and
  // read its cached output back as drafts. Refused at the first call.
  for (const Caller& outsider : {Caller{}, Caller{nullptr, "Bearer key-a"}, Caller{nullptr, "Bearer root-key"},
                                 Caller{nullptr, std::string("Bearer ") + kKey + "-wrong"}}) {
    const std::string who = outsider.authorization.empty() ? "no key" : outsider.authorization;
    const grpc::Status start = Start(s, outsider, "team-b", "probe");
    EXPECT_EQ(start.error_code(), grpc::StatusCode::UNAUTHENTICATED) << who;
    EXPECT_NE(start.error_message().find("SuffixCache.StartRequest"), std::string::npos) << start.error_message();
    floe::v1::SuffixStepResponse drafts;
    const grpc::Status step = Step(s, outsider, "team-b", "r-team-b", &drafts);
    EXPECT_EQ(step.error_code(), grpc::StatusCode::UNAUTHENTICATED) << who;
    EXPECT_EQ(drafts.results_size(), 0) << who;
    EXPECT_EQ(End(s, outsider, "team-b", "probe").error_code(), grpc::StatusCode::UNAUTHENTICATED) << who;
    EXPECT_EQ(Abort(s, outsider, "team-b", "probe").error_code(), grpc::StatusCode::UNAUTHENTICATED) << who;
  }
  // The same calls with the key are served, and a Step drafts from the
  // namespace's cached response.
  ASSERT_TRUE(Start(s, internal_, "team-b", "next").ok());
  floe::v1::SuffixStepRequest req;
  auto* e = req.add_entries();
  e->set_namespace_("team-b");
  e->set_request_id("next");
  for (int32_t t : {5, 6}) e->add_appended(t);
  e->set_speculate(true);
  req.mutable_params()->set_max_spec_tokens(8);
  req.mutable_params()->set_max_spec_factor(4);
  floe::v1::SuffixStepResponse drafts;
  ASSERT_TRUE(s.stub->Step(internal_.Context().get(), req, &drafts).ok());
  ASSERT_EQ(drafts.results_size(), 1);
  ASSERT_GT(drafts.results(0).token_ids_size(), 0) << drafts.DebugString();
  EXPECT_EQ(drafts.results(0).token_ids(0), 7) << "team-b's cached response continues 5, 6 with 7";
  EXPECT_TRUE(Abort(s, internal_, "team-b", "next").ok());
}

TEST_F(SuffixCacheInternalTrustTest, GetStatsShowsATenantOnlyItsOwnNamespaces) {
  Server s(trust_, &*keys_);
  Fill(s, {"team-a", "team-a/agents", "team-b", "team-ab", "default"});

  floe::v1::SuffixStats all;
  ASSERT_TRUE(Stats(s, internal_, &all).ok());
  EXPECT_EQ(Names(all), (std::vector<std::string>{"default", "team-a", "team-a/agents", "team-ab", "team-b"}));
  EXPECT_EQ(all.cached_responses(), 5);
  EXPECT_EQ(all.steps_total(), 5);
  floe::v1::SuffixStats admin;
  ASSERT_TRUE(Stats(s, Caller{nullptr, "Bearer root-key"}, &admin).ok());
  EXPECT_EQ(Names(admin), Names(all));
  EXPECT_EQ(admin.steps_total(), 5);

  floe::v1::SuffixStats a;
  ASSERT_TRUE(Stats(s, Caller{nullptr, "Bearer key-a"}, &a).ok());
  EXPECT_EQ(Names(a), (std::vector<std::string>{"team-a", "team-a/agents"}));
  EXPECT_EQ(a.cached_responses(), 2);
  EXPECT_EQ(a.cached_tokens(), a.namespaces(0).cached_tokens() + a.namespaces(1).cached_tokens());
  EXPECT_GT(a.cached_tokens(), 0);
  EXPECT_EQ(a.active_requests(), 0);
  EXPECT_EQ(a.steps_total(), 0) << "service-wide counters mix every tenant's traffic";
  EXPECT_EQ(a.drafts_total(), 0);
  EXPECT_EQ(a.max_depth(), all.max_depth()) << "the configuration is no tenant's data";
  floe::v1::SuffixStats b;
  ASSERT_TRUE(Stats(s, Caller{nullptr, "Bearer key-b"}, &b).ok());
  EXPECT_EQ(Names(b), (std::vector<std::string>{"team-b"}));

  for (const Caller& outsider : {Caller{}, Caller{nullptr, "Bearer key-c"}, Caller{nullptr, "Basic key-a"}}) {
    floe::v1::SuffixStats none;
    const grpc::Status refused = Stats(s, outsider, &none);
    EXPECT_EQ(refused.error_code(), grpc::StatusCode::UNAUTHENTICATED) << outsider.authorization;
    EXPECT_NE(refused.error_message().find("--admin-key-file"), std::string::npos) << refused.error_message();
    EXPECT_EQ(none.namespaces_size(), 0);
  }
}

TEST_F(SuffixCacheInternalTrustTest, AdminCallsNeedAnAdminKeyElseTheInternalKey) {
  auto clear = [](Server& s, const Caller& c) {
    floe::v1::SuffixClearNamespaceRequest req;
    req.set_namespace_("team-a");
    floe::v1::SuffixClearNamespaceResponse resp;
    return s.stub->ClearNamespace(c.Context().get(), req, &resp);
  };
  {
    Server s(trust_, &*keys_);
    EXPECT_TRUE(clear(s, Caller{nullptr, "Bearer root-key"}).ok());
    EXPECT_EQ(clear(s, Caller{nullptr, "Bearer key-a"}).error_code(), grpc::StatusCode::PERMISSION_DENIED);
    EXPECT_EQ(clear(s, internal_).error_code(), grpc::StatusCode::UNAUTHENTICATED);
  }
  {
    Server s(trust_, nullptr);
    EXPECT_TRUE(clear(s, internal_).ok());
    const grpc::Status refused = clear(s, Caller{});
    EXPECT_EQ(refused.error_code(), grpc::StatusCode::UNAUTHENTICATED);
    EXPECT_NE(refused.error_message().find("SuffixCache.ClearNamespace"), std::string::npos)
        << refused.error_message();
    floe::v1::SuffixStats none;
    const grpc::Status stats = Stats(s, Caller{nullptr, "Bearer key-a"}, &none);
    EXPECT_EQ(stats.error_code(), grpc::StatusCode::UNAUTHENTICATED);
    EXPECT_EQ(stats.error_message().find("--admin-key-file"), std::string::npos)
        << "no admin-key file: only the internal key is offered: " << stats.error_message();
  }
}

TEST_F(SuffixCacheInternalTrustTest, WithoutATrustEverythingStaysOpenAsBefore) {
  Server s(nullptr, &*keys_);
  const Caller nobody;
  for (const std::string ns : {"team-a", "team-b"}) {
    ASSERT_TRUE(Start(s, nobody, ns, "r").ok());
    ASSERT_TRUE(End(s, nobody, ns, "r").ok());
  }
  floe::v1::SuffixStats all;
  ASSERT_TRUE(Stats(s, nobody, &all).ok());
  EXPECT_EQ(Names(all), (std::vector<std::string>{"team-a", "team-b"}));
}

}  // namespace
}  // namespace floe::suffix_cache
