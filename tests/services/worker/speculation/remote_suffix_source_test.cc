// Two workers share a floe-suffix-cache (in process, on loopback): what one
// worker generated becomes drafts for the other through the global tree, the
// output stays exactly that of plain decoding, and a dead service only costs
// drafts, never tokens.
#include "services/worker/speculation/remote_suffix_source.h"

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

class RemoteSuffixSourceTest : public EngineHarness {
 protected:
  // A worker whose suffix proposer has no local global tree: drafts across
  // requests can only come from the service.
  static std::unique_ptr<EngineCore> Worker(SuffixCacheClient* client) {
    EngineOptions options;
    options.block_size = 4;
    options.num_blocks = 256;
    options.num_speculative_tokens = 6;
    options.speculative_token_threshold = 1 << 20;
    SuffixProposerOptions suffix;
    suffix.max_cached_requests = 0;
    std::vector<std::unique_ptr<Proposer>> p;
    p.push_back(std::make_unique<SuffixProposer>(
        suffix, std::make_unique<RemoteSuffixSource>(client, suffix.params)));
    return MakeEngine(options, std::move(p));
  }
};

TEST_F(RemoteSuffixSourceTest, OneWorkersResponseDraftsForAnother) {
  TestServer server(StoreOptions{}, ServiceLimits{});
  ClientOptions options;
  options.addresses = {server.runner->address()};
  options.step_deadline = std::chrono::milliseconds(500);  // loaded CI machines
  auto client = SuffixCacheClient::Create(options);
  ASSERT_TRUE(client.ok());

  std::mt19937 rng(9);
  auto a = MakeRequest("a", RandomPrompt(rng, 12), 24);
  a.speculation.ns = "team";
  auto want = RunAlone({a})["a"].tokens;

  auto first = Worker(client->get());
  EXPECT_EQ(Run(*first, {a})["a"].tokens, want);
  auto second = Worker(client->get());
  auto b = a;
  b.id = "b";
  EXPECT_EQ(Run(*second, {b})["b"].tokens, want);
  const SpeculationCounters& c = second->counters().speculation.at(0);
  EXPECT_GE(c.accepted_tokens, 12) << "drafts: " << c.drafts << " draft tokens: " << c.draft_tokens;
  EXPECT_EQ(server.store.Stats().cached, 2);
}

TEST_F(RemoteSuffixSourceTest, UnreachableServiceOnlyCostsDrafts) {
  ClientOptions options;
  options.addresses = {"127.0.0.1:1"};
  options.step_deadline = std::chrono::milliseconds(5);
  options.call_deadline = std::chrono::milliseconds(20);
  auto client = SuffixCacheClient::Create(options);
  ASSERT_TRUE(client.ok());
  auto requests = MixedBatch(3, /*seeded=*/false);
  auto want = RunAlone(requests);
  auto worker = Worker(client->get());
  ExpectSameTokens(Run(*worker, requests), want);
}

TEST(MakeProposersTest, FlagsToProposers) {
  EXPECT_TRUE(MakeProposers({"off", 4, {}, 5})->empty());
  EXPECT_EQ(MakeProposers({"ngram", 4, {}, 5})->at(0)->name(), "ngram");
  EXPECT_EQ(MakeProposers({"suffix", 4, {"127.0.0.1:1"}, 5})->at(0)->name(), "suffix");
  auto bad = MakeProposers({"medusa", 4, {}, 5});
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("medusa"), absl::string_view::npos);
  EXPECT_EQ(MakeProposers({"ngram", 0, {}, 5}).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace floe
