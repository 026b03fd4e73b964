// Two workers share a floe-suffix-cache (in process, on loopback): what one
// worker generated becomes drafts for the other through the global tree, the
// output stays exactly that of plain decoding, and a dead service only costs
// drafts, never tokens.
#include "services/worker/speculation/remote_suffix_source.h"

#include "absl/synchronization/notification.h"
#include "services/worker/speculation/make_proposers.h"

#include "tests/services/suffix_cache/service/test_server.h"
#include "tests/services/worker/engine/engine_test_harness.h"

namespace floe {
namespace {

using suffix_cache::ClientOptions;
using suffix_cache::ServiceLimits;
using suffix_cache::StoreOptions;
using suffix_cache::SuffixCacheClient;
using suffix_cache::TestServer;

// How long any call here may take: these tests are about what reaches the
// service and what it drafts, not about deadlines (UnreachableServiceOnlyCostsDrafts
// and suffix_cache_client_test are), and a sanitized build beside busy CPUs
// can take hundreds of ms for a loopback call.
constexpr std::chrono::seconds kPatient{30};

// A client to `address` whose Steps and lifecycle calls wait kPatient: a late
// Start would otherwise leave its request unregistered (no drafts, no End),
// and a late Step would cost that step's draft.
std::unique_ptr<SuffixCacheClient> PatientClient(const std::string& address) {
  ClientOptions options;
  options.addresses = {address};
  options.step_deadline = kPatient;
  options.call_deadline = kPatient;
  auto client = SuffixCacheClient::Create(options);
  EXPECT_TRUE(client.ok()) << client.status();
  return client.ok() ? std::move(client).value() : nullptr;
}

// A RemoteSuffixSource whose requests are registered before the engine's next
// step: after each Query the engine thread waits until the lifecycle thread
// has run what that Query queued (its StartRequests). In a worker the engine
// never waits, so a Start may land any number of steps later on a busy host;
// here how many steps a request drafts for must not depend on that, or the
// accepted-token counts below would measure the host, not the source.
class RegisteredBeforeNextStep final : public GlobalDraftSource {
 public:
  explicit RegisteredBeforeNextStep(std::unique_ptr<RemoteSuffixSource> source) : source_(std::move(source)) {}
  void Query(std::span<const SpecSequence> batch, int max_spec_tokens, std::span<DraftProposal> out) override {
    source_->Query(batch, max_spec_tokens, out);
    EXPECT_TRUE(source_->WaitIdle(absl::Seconds(60))) << "a StartRequest did not finish";
  }
  void Finish(std::string_view request_id, std::string_view ns, std::span<const int32_t> tokens,
              int32_t prompt_len) override {
    source_->Finish(request_id, ns, tokens, prompt_len);
  }

 private:
  std::unique_ptr<RemoteSuffixSource> source_;
};

class RemoteSuffixSourceTest : public EngineHarness {
 protected:
  // A worker whose suffix proposer has no local global tree: drafts across
  // requests can only come from the service. Its draft budget is pinned
  // (SpeculationOptions), and its requests register before their next step
  // (RegisteredBeforeNextStep).
  // `source`, when given, receives the remote source (owned by the engine).
  static std::unique_ptr<EngineCore> Worker(SuffixCacheClient* client, RemoteSuffixSource** source = nullptr,
                                            RemoteSuffixOptions remote = {}) {
    EngineOptions options = SpeculationOptions(6);
    options.num_blocks = 256;
    SuffixProposerOptions suffix;
    suffix.max_cached_requests = 0;
    std::vector<std::unique_ptr<Proposer>> p;
    auto global = std::make_unique<RemoteSuffixSource>(client, suffix.params, std::move(remote));
    if (source) *source = global.get();
    p.push_back(std::make_unique<SuffixProposer>(
        suffix, std::make_unique<RegisteredBeforeNextStep>(std::move(global))));
    return MakeEngine(options, std::move(p));
  }
};

TEST_F(RemoteSuffixSourceTest, OneWorkersResponseDraftsForAnother) {
  TestServer server(StoreOptions{}, ServiceLimits{});
  auto client = PatientClient(server.runner->address());
  ASSERT_TRUE(client);

  std::mt19937 rng(9);
  auto a = MakeRequest("a", RandomPrompt(rng, 12), 24);
  a.speculation.ns = "team";
  auto want = RunAlone({a})["a"].tokens;

  RemoteSuffixSource* first_source = nullptr;
  auto first = Worker(client.get(), &first_source);
  EXPECT_EQ(Run(*first, {a})["a"].tokens, want);
  // End runs on the source's lifecycle thread: wait until it has.
  ASSERT_TRUE(first_source->WaitIdle(absl::Seconds(60)));
  RemoteSuffixSource* second_source = nullptr;
  auto second = Worker(client.get(), &second_source);
  auto b = a;
  b.id = "b";
  EXPECT_EQ(Run(*second, {b})["b"].tokens, want);
  // b registers on its first decoding step and drafts from a's response on
  // every step after: 23 tokens to go in drafts of up to 6.
  const SpeculationCounters& c = second->counters().speculation.at(0);
  EXPECT_GE(c.accepted_tokens, 12) << "drafts: " << c.drafts << " draft tokens: " << c.draft_tokens;
  ASSERT_TRUE(second_source->WaitIdle(absl::Seconds(60)));
  EXPECT_EQ(server.store.Stats().cached, 2);
}

// The Start and End calls run on the lifecycle thread (the test's wrapper
// only waits for them, so that Steps go out on any host).
TEST_F(RemoteSuffixSourceTest, StatsCountCallsAndLifecycleRunsOffTheEngineThread) {
  TestServer server(StoreOptions{}, ServiceLimits{});
  auto client = PatientClient(server.runner->address());
  ASSERT_TRUE(client);
  RemoteSuffixOptions remote;
  remote.stats = std::make_shared<RemoteSuffixStats>(client->addresses());
  RemoteSuffixSource* source = nullptr;
  auto worker = Worker(client.get(), &source, remote);
  auto requests = MixedBatch(3, /*seeded=*/false);
  auto want = RunAlone(requests);
  ExpectSameTokens(Run(*worker, requests), want);
  ASSERT_TRUE(source->WaitIdle(absl::Seconds(60)));
  const RemoteSuffixStats::Snapshot s = remote.stats->Read();
  EXPECT_EQ(s.latency[RemoteSuffixStats::kStart].count, 3);
  EXPECT_GE(s.latency[RemoteSuffixStats::kEnd].count, 3);  // End, after a last append when tokens were pending
  EXPECT_EQ(s.latency[RemoteSuffixStats::kStep].count, source->counters().steps);
  EXPECT_GT(source->counters().steps, 0);
  for (const auto& per_call : s.failures)
    for (int64_t n : per_call) EXPECT_EQ(n, 0);
  ASSERT_EQ(s.replicas.size(), 1u);
  EXPECT_TRUE(s.replicas[0].up);
  EXPECT_EQ(server.store.Stats().cached, 3);
}

// Under load the engine asks no drafts (its cost model), so no Step names a
// request; the lifecycle thread's renewal Steps keep the service from
// expiring it, and its response still joins the tree at the end. Without
// renewals (the control) the same idle request expires.
// Timing: a renewal every 50 ms against a 1 s lease, so the renewing run
// fails only if the lifecycle thread is starved for most of a second.
TEST_F(RemoteSuffixSourceTest, LeasesOfRequestsNotDraftedForAreRenewed) {
  constexpr auto kLease = std::chrono::milliseconds(1000);
  for (const bool renew : {true, false}) {
    SCOPED_TRACE(renew ? "renewing" : "control: no renewal");
    StoreOptions store;
    store.request_lease = kLease;
    TestServer server(store, ServiceLimits{});
    auto client = PatientClient(server.runner->address());
    ASSERT_TRUE(client);
    RemoteSuffixOptions remote;
    remote.lease_renewal = renew ? absl::Milliseconds(50) : absl::Hours(1);
    RemoteSuffixSource source(client.get(), SuffixProposerOptions{}.params, remote);

    const std::vector<int32_t> tokens = {5, 6, 7, 8, 9, 10, 11, 12, 13, 14};  // 8 prompt + 2 response
    SpecSequence seq{"a", "", std::span<const int32_t>(tokens.data(), 8), 8, 4, {}};
    std::vector<DraftProposal> out(1);
    source.Query({&seq, 1}, 4, out);  // registers it (StartRequest, off this thread)
    ASSERT_TRUE(source.WaitIdle(absl::Seconds(60)));
    ASSERT_EQ(server.store.Stats().active, 1);
    if (!renew) {
      // Expired within a lease and a sweep period of its Start: waited for
      // (with a deadline), not slept for.
      const absl::Time deadline = absl::Now() + absl::Seconds(30);
      while (server.store.Stats().active != 0 && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(20));
      const suffix_cache::StoreStats stats = server.store.Stats();
      EXPECT_EQ(stats.active, 0);
      EXPECT_EQ(stats.expired_total, 1);
      EXPECT_EQ(source.renewals(), 0);
      continue;
    }
    // Three leases with no Step from the engine.
    absl::SleepFor(absl::FromChrono(3 * kLease));
    const suffix_cache::StoreStats stats = server.store.Stats();
    EXPECT_EQ(stats.active, 1);
    EXPECT_EQ(stats.expired_total, 0);
    EXPECT_GE(source.renewals(), 4);
    source.Finish("a", "", tokens, 8);
    ASSERT_TRUE(source.WaitIdle(absl::Seconds(60)));
    EXPECT_EQ(server.store.Stats().cached, 1);
    EXPECT_EQ(server.store.Stats().cached_tokens, 2);
  }
}

// A StartRequest refused for the service's --max-bytes (RESOURCE_EXHAUSTED)
// proves the replica is up: refusals cost those requests their drafts but
// never back the replica off for everyone else.
TEST_F(RemoteSuffixSourceTest, AFullServiceIsNotBackedOff) {
  StoreOptions store;
  store.max_bytes = 1 << 16;  // no 20k-token prompt fits
  TestServer server(store, ServiceLimits{});
  // Patient: a refusal that came late would read as a transport failure.
  auto client = PatientClient(server.runner->address());
  ASSERT_TRUE(client);
  RemoteSuffixOptions remote;
  remote.stats = std::make_shared<RemoteSuffixStats>(client->addresses());
  RemoteSuffixSource source(client.get(), SuffixProposerOptions{}.params, remote);
  std::vector<int32_t> prompt(20000);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<int32_t>(i % 5000);
  const std::vector<std::string> ids = {"r0", "r1", "r2", "r3", "r4", "r5"};
  for (const std::string& id : ids) {
    SpecSequence seq{id, "", prompt, static_cast<int32_t>(prompt.size()), 4, {}};
    std::vector<DraftProposal> out(1);
    source.Query({&seq, 1}, 4, out);
    ASSERT_TRUE(source.WaitIdle(absl::Seconds(60)));
  }
  const RemoteSuffixStats::Snapshot s = remote.stats->Read();
  EXPECT_EQ(s.latency[RemoteSuffixStats::kStart].count, 6);  // every Start was sent: none skipped
  EXPECT_EQ(s.replicas.at(0).went_down, 0);
  EXPECT_TRUE(s.replicas.at(0).up);
  EXPECT_EQ(server.store.Stats().active, 0);
}

TEST_F(RemoteSuffixSourceTest, UnreachableServiceOnlyCostsDrafts) {
  ClientOptions options;
  options.addresses = {"127.0.0.1:1"};
  options.step_deadline = std::chrono::milliseconds(5);
  options.call_deadline = std::chrono::milliseconds(20);
  auto client = SuffixCacheClient::Create(options);
  ASSERT_TRUE(client.ok());
  RemoteSuffixOptions remote;
  remote.stats = std::make_shared<RemoteSuffixStats>(options.addresses);
  remote.backoff.initial_backoff = absl::Hours(1);  // no probe during the test
  auto requests = MixedBatch(3, /*seeded=*/false);
  auto want = RunAlone(requests);
  RemoteSuffixSource* source = nullptr;
  auto worker = Worker(client->get(), &source, remote);
  ExpectSameTokens(Run(*worker, requests), want);
  ASSERT_TRUE(source->WaitIdle(absl::Seconds(60)));
  // Three Starts fail, the replica goes down, and nothing is called after.
  const RemoteSuffixStats::Snapshot s = remote.stats->Read();
  EXPECT_EQ(s.replicas.at(0).went_down, 1);
  EXPECT_FALSE(s.replicas.at(0).up);
  EXPECT_EQ(s.replicas.at(0).probes, 0);
  int64_t failed = 0, calls = 0;
  for (int c = 0; c < RemoteSuffixStats::kNumCalls; ++c) {
    calls += s.latency[c].count;
    for (int64_t n : s.failures[c]) failed += n;
  }
  EXPECT_EQ(failed, 3);
  EXPECT_EQ(calls, 3);
  EXPECT_EQ(source->counters().steps, 0);  // no request ever started, so no Step went out
}

// A suffix-cache that records the calls it gets (Steps in full) and holds
// every StartRequest until `release` is notified.
class GatedSuffixCache final : public floe::v1::SuffixCache::Service {
 public:
  grpc::Status StartRequest(grpc::ServerContext*, const floe::v1::SuffixStartRequest* req,
                            floe::v1::SuffixStartResponse*) override {
    Record("start " + req->request_id());
    release.WaitForNotificationWithTimeout(absl::Seconds(60));
    return grpc::Status::OK;
  }
  grpc::Status Step(grpc::ServerContext*, const floe::v1::SuffixStepRequest* req,
                    floe::v1::SuffixStepResponse* resp) override {
    {
      absl::MutexLock l(&mu_);
      steps_.push_back(*req);
    }
    Record("step");
    for (int i = 0; i < req->entries_size(); ++i) resp->add_results();  // answered, no draft
    return grpc::Status::OK;
  }
  grpc::Status EndRequest(grpc::ServerContext*, const floe::v1::SuffixEndRequest* req,
                          floe::v1::SuffixEndResponse*) override {
    Record("end " + req->request_id());
    return grpc::Status::OK;
  }

  bool WaitForCall(const std::string& call, absl::Duration timeout) {
    absl::MutexLock l(&mu_);
    auto seen = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return std::find(calls_.begin(), calls_.end(), call) != calls_.end();
    };
    return mu_.AwaitWithTimeout(absl::Condition(&seen), timeout);
  }
  std::vector<std::string> calls() {
    absl::MutexLock l(&mu_);
    return calls_;
  }
  std::vector<floe::v1::SuffixStepRequest> steps() {
    absl::MutexLock l(&mu_);
    return steps_;
  }

  absl::Notification release;

 private:
  void Record(const std::string& call) {
    absl::MutexLock l(&mu_);
    calls_.push_back(call);
  }
  absl::Mutex mu_;
  std::vector<std::string> calls_ ABSL_GUARDED_BY(mu_);
  std::vector<floe::v1::SuffixStepRequest> steps_ ABSL_GUARDED_BY(mu_);
};

// A RemoteSuffixSource on a GatedSuffixCache, driven as the engine thread
// drives it: every request has prompt {1, 2, 3} and output {4, 5}.
class RemoteSuffixLifecycleTest : public testing::Test {
 protected:
  RemoteSuffixLifecycleTest() {
    auto runner = ServerRunner::Start({"127.0.0.1:0"}, {&service_});
    EXPECT_TRUE(runner.ok()) << runner.status();
    runner_ = std::move(runner).value();
    ClientOptions options;
    options.addresses = {runner_->address()};
    options.step_deadline = std::chrono::seconds(5);  // nothing here is about deadlines
    options.call_deadline = std::chrono::seconds(30);
    auto client = SuffixCacheClient::Create(options);
    EXPECT_TRUE(client.ok()) << client.status();
    client_ = std::move(client).value();
    stats_ = std::make_shared<RemoteSuffixStats>(options.addresses);
  }
  ~RemoteSuffixLifecycleTest() override {
    if (!service_.release.HasBeenNotified()) service_.release.Notify();  // a failed test may leave a Start held
    source_.reset();
    runner_->Shutdown(std::chrono::milliseconds(100));
  }

  RemoteSuffixSource& Source(int max_pending_lifecycle) {
    RemoteSuffixOptions remote;
    remote.max_pending_lifecycle = max_pending_lifecycle;
    remote.stats = stats_;
    source_ = std::make_unique<RemoteSuffixSource>(client_.get(), suffix_cache::DraftParams{}, remote);
    return *source_;
  }
  // One Query (an engine step) over `ids` with their draft caps.
  void Query(const std::vector<std::pair<std::string, int32_t>>& ids, int max_spec_tokens) {
    std::vector<SpecSequence> batch;
    for (const auto& [id, max_draft] : ids) {
      SpecSequence s;
      s.request_id = id;
      s.tokens = tokens_;
      s.prompt_len = 3;
      s.max_draft = max_draft;
      batch.push_back(s);
    }
    std::vector<DraftProposal> out(batch.size());
    source_->Query(batch, max_spec_tokens, out);
  }
  void Finish(const std::string& id) { source_->Finish(id, "", tokens_, 3); }

  GatedSuffixCache service_;
  std::unique_ptr<ServerRunner> runner_;
  std::unique_ptr<SuffixCacheClient> client_;
  std::shared_ptr<RemoteSuffixStats> stats_;
  std::unique_ptr<RemoteSuffixSource> source_;
  const std::vector<int32_t> tokens_ = {1, 2, 3, 4, 5};
};

TEST_F(RemoteSuffixLifecycleTest, AFullQueueDropsStartsNotEnds) {
  RemoteSuffixSource& source = Source(/*max_pending_lifecycle=*/2);
  Query({{"r0", 4}}, 4);  // its Start goes out and is held by the service
  ASSERT_TRUE(service_.WaitForCall("start r0", absl::Seconds(30)));
  Query({{"r1", 4}, {"r2", 4}}, 4);  // queued: the queue is full
  Finish("r0");                      // its End takes the place of r2's Start
  Finish("r2");                      // r2 never registers: no End is queued
  Query({{"r3", 4}}, 4);             // [Start r1, End r0] is full: dropped
  service_.release.Notify();
  ASSERT_TRUE(source.WaitIdle(absl::Seconds(30)));
  // r0 is ended (after its last tokens), not left open until the TTL.
  EXPECT_EQ(service_.calls(), (std::vector<std::string>{"start r0", "start r1", "step", "end r0"}));
  EXPECT_EQ(stats_->Read().dropped_lifecycle, 2);
}

TEST_F(RemoteSuffixLifecycleTest, EachEntryCarriesItsOwnDraftCapAndTheStepNone) {
  service_.release.Notify();
  RemoteSuffixSource& source = Source(16);
  Query({{"a", 3}, {"b", 8}}, 5);  // registers both
  ASSERT_TRUE(source.WaitIdle(absl::Seconds(30)));
  Query({{"a", 3}, {"b", 8}}, 5);
  const std::vector<floe::v1::SuffixStepRequest> steps = service_.steps();
  ASSERT_EQ(steps.size(), 1u);
  EXPECT_FALSE(steps[0].has_params());
  ASSERT_EQ(steps[0].entries_size(), 2);
  // min(the engine's cap for the request, the proposer's cap).
  EXPECT_EQ(steps[0].entries(0).params().max_spec_tokens(), 3);
  EXPECT_EQ(steps[0].entries(1).params().max_spec_tokens(), 5);
  for (const auto& e : steps[0].entries()) {
    EXPECT_TRUE(e.speculate());
    EXPECT_FLOAT_EQ(e.params().min_token_prob(), suffix_cache::DraftParams{}.min_token_prob);
    EXPECT_EQ(std::vector<int32_t>(e.appended().begin(), e.appended().end()), (std::vector<int32_t>{4, 5}));
  }
}

TEST(ReplicaBackoffTest, DownAfterFailuresInARowThenProbesWithDoublingBackoff) {
  BackoffOptions options;
  options.failures_to_down = 2;
  options.initial_backoff = absl::Milliseconds(100);
  options.max_backoff = absl::Milliseconds(300);
  ReplicaBackoff backoff(2, options);
  const absl::Time t0 = absl::UnixEpoch();
  using Gate = ReplicaBackoff::Gate;
  EXPECT_EQ(backoff.Admit(0, t0), Gate::kSend);
  EXPECT_FALSE(backoff.Report(0, false, t0));
  EXPECT_FALSE(backoff.Report(0, true, t0));  // a success resets the count
  EXPECT_FALSE(backoff.Report(0, false, t0));
  EXPECT_TRUE(backoff.Report(0, false, t0));  // second in a row: down
  EXPECT_FALSE(backoff.up(0));
  EXPECT_TRUE(backoff.up(1));  // replicas are independent
  EXPECT_EQ(backoff.Admit(1, t0), Gate::kSend);
  EXPECT_EQ(backoff.Admit(0, t0 + absl::Milliseconds(99)), Gate::kSkip);
  EXPECT_EQ(backoff.Admit(0, t0 + absl::Milliseconds(100)), Gate::kProbe);
  EXPECT_EQ(backoff.Admit(0, t0 + absl::Milliseconds(101)), Gate::kSkip);  // one probe at a time
  absl::Time t = t0 + absl::Milliseconds(110);
  EXPECT_FALSE(backoff.Report(0, false, t));  // failed probe: 200 ms
  EXPECT_EQ(backoff.Admit(0, t + absl::Milliseconds(199)), Gate::kSkip);
  EXPECT_EQ(backoff.Admit(0, t + absl::Milliseconds(200)), Gate::kProbe);
  t += absl::Milliseconds(200);
  EXPECT_FALSE(backoff.Report(0, false, t));  // 400 ms capped at 300
  EXPECT_EQ(backoff.Admit(0, t + absl::Milliseconds(299)), Gate::kSkip);
  EXPECT_EQ(backoff.Admit(0, t + absl::Milliseconds(300)), Gate::kProbe);
  EXPECT_TRUE(backoff.Report(0, true, t + absl::Milliseconds(301)));  // back up, backoff reset
  EXPECT_TRUE(backoff.up(0));
  EXPECT_EQ(backoff.Admit(0, t + absl::Milliseconds(302)), Gate::kSend);
  EXPECT_FALSE(backoff.Report(0, false, t));
  EXPECT_TRUE(backoff.Report(0, false, t));
  EXPECT_EQ(backoff.Admit(0, t + absl::Milliseconds(99)), Gate::kSkip);
  EXPECT_EQ(backoff.Admit(0, t + absl::Milliseconds(100)), Gate::kProbe);
}

TEST(MakeProposersTest, FlagsToProposers) {
  EXPECT_TRUE(MakeProposers({"off", 4, {}, 5})->empty());
  EXPECT_EQ(MakeProposers({"ngram", 4, {}, 5})->at(0)->name(), "ngram");
  EXPECT_EQ(MakeProposers({"suffix", 4, {"127.0.0.1:1"}, 5})->at(0)->name(), "suffix");
  auto bad = MakeProposers({"medusa", 4, {}, 5});
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("medusa"), absl::string_view::npos);
  EXPECT_EQ(MakeProposers({"ngram", 0, {}, 5}).status().code(), absl::StatusCode::kInvalidArgument);
  // --suffix-cache only feeds suffix drafts: with any other method it is an error, not ignored.
  for (const char* method : {"ngram", "off"}) {
    auto ignored = MakeProposers({method, 4, {"127.0.0.1:1"}, 5});
    EXPECT_EQ(ignored.status().code(), absl::StatusCode::kInvalidArgument) << method;
    EXPECT_NE(ignored.status().message().find("--suffix-cache"), absl::string_view::npos) << ignored.status();
    EXPECT_NE(ignored.status().message().find(method), absl::string_view::npos) << ignored.status();
  }
}

// Suffix drafts use Floe's default mode unless reference_compatible: there
// the context's own tail is no occurrence (discount_own_suffix), so a prompt
// repeating once drafts its copy with probability 1, not 1/2 (three tokens:
// the budget of a 3-token match).
TEST(MakeProposersTest, SuffixDraftsInFloesModeByDefault) {
  const std::vector<int32_t> prompt = {5, 6, 7, 8, 9, 5, 6, 7};
  for (bool reference : {false, true}) {
    SpeculationConfig config{"suffix", 4, {}, 5};
    config.reference_compatible = reference;
    auto proposers = MakeProposers(config);
    ASSERT_TRUE(proposers.ok()) << proposers.status();
    SpecSequence s;
    s.request_id = "r";
    s.tokens = prompt;
    s.prompt_len = static_cast<int32_t>(prompt.size());
    s.max_draft = 4;
    std::vector<DraftProposal> out(1);
    proposers->at(0)->Propose(std::span<const SpecSequence>(&s, 1), out);
    EXPECT_EQ(out[0].tokens, (std::vector<int32_t>{8, 9, 5})) << "reference " << reference;
    EXPECT_FLOAT_EQ(out[0].score, reference ? 1.5f : 3.0f) << "reference " << reference;
  }
}

}  // namespace
}  // namespace floe
