// The LSTM speculator through the engine: --speculative lstm and
// suffix+lstm generate exactly what plain decoding does (greedy and seeded,
// batched), and the draft selector weighs proposers by each request's
// measured acceptance.
#include <filesystem>

#include "services/worker/engine/draft_selector.h"
#include "services/worker/speculation/lstm_proposer.h"
#include "services/worker/speculation/speculator_writer.h"
#include "services/worker/speculation/suffix_proposer.h"
#include "tests/services/worker/engine/engine_test_harness.h"
#include "tests/services/worker/speculation/test_proposers.h"

namespace floe {
namespace {

class LstmSpeculationTest : public EngineHarness {
 protected:
  static void SetUpTestSuite() {
    EngineHarness::SetUpTestSuite();
    speculator_dir_ = new std::string(dir_->string() + "_speculator");
    WriteTestSpeculator(checkpoint_->config(), *speculator_dir_);
  }
  static void TearDownTestSuite() {
    std::filesystem::remove_all(*speculator_dir_);
    delete speculator_dir_;
    EngineHarness::TearDownTestSuite();
  }
  static std::unique_ptr<Proposer> Lstm() { return LoadTestLstm(checkpoint_->config(), *speculator_dir_); }
  // Prompts that repeat themselves; the random model's greedy output falls
  // into loops the suffix tree drafts from.
  static std::vector<EngineRequest> Batch(bool seeded) {
    std::mt19937 rng(31);
    std::vector<EngineRequest> requests;
    for (int i = 0; i < 5; ++i) {
      auto motif = RandomPrompt(rng, 3 + i);
      std::vector<int32_t> prompt;
      for (int rep = 0; rep < 4; ++rep) prompt.insert(prompt.end(), motif.begin(), motif.end());
      auto r = MakeRequest("r" + std::to_string(i), prompt, 24 + i);
      if (seeded) MakeSeeded(r, 70 + i);
      requests.push_back(std::move(r));
    }
    return requests;
  }
  static std::string* speculator_dir_;
};

std::string* LstmSpeculationTest::speculator_dir_ = nullptr;

TEST_F(LstmSpeculationTest, LstmAndSuffixPlusLstmMatchPlainDecoding) {
  for (bool seeded : {false, true}) {
    auto requests = Batch(seeded);
    const EngineOptions options = SpeculationOptions(4);
    auto want = RunWithoutSpeculation(requests, options);
    for (bool with_suffix : {false, true}) {
      SCOPED_TRACE(std::string(with_suffix ? "suffix+lstm" : "lstm") + (seeded ? " seeded" : " greedy"));
      std::vector<std::unique_ptr<Proposer>> proposers;
      if (with_suffix) proposers.push_back(std::make_unique<SuffixProposer>(SuffixProposerOptions{}));
      proposers.push_back(Lstm());
      auto core = MakeEngine(options, std::move(proposers));
      ExpectSameTokens(Run(*core, requests), want);
      const auto& counters = core->counters().speculation;
      const SpeculationCounters& lstm = counters.back();
      EXPECT_EQ(lstm.proposer, "lstm");
      // Every decoding step with a hidden state drafts (n_predict 3 <= k).
      EXPECT_GT(lstm.drafts, 0);
      EXPECT_LE(lstm.draft_tokens, 3 * lstm.drafts);
      if (with_suffix && !seeded) EXPECT_GT(counters.front().drafts, 0);  // the repeats
    }
  }
}

// Choose on a copy (it may shorten candidates).
int Pick(DraftSelector& selector, const Sequence& seq, std::vector<DraftCandidate> candidates, double overhead) {
  return selector.Choose(seq, candidates, overhead);
}

TEST(DraftSelectorTest, ValueIsExpectedEmittedTokensPerVerifiedRow) {
  // Brute force over the first rejection position: P(accept exactly n of
  // L) = a^n (1 - a) for n < L, a^L for n = L; a step emits n + 1 tokens.
  for (double a : {0.0, 0.3, 0.9, 1.0}) {
    for (int length = 0; length <= 8; ++length) {
      double expected = 0.0;
      for (int n = 0; n <= length; ++n)
        expected += (n + 1) * std::pow(a, n) * (n < length ? 1.0 - a : 1.0);
      EXPECT_NEAR(AcceptanceRateSelector::Value(a, length, 1.0), expected / (1.0 + 1.0 + length), 1e-12)
          << a << " " << length;
    }
  }
}

TEST(DraftSelectorTest, PerRequestAcceptancePicksTheDraftThatPays) {
  AcceptanceRateSelector selector(2);
  DraftProposal suffix_draft{{1, 2, 3, 4, 5, 6, 7, 8}, {}, 8.0f}, lstm_draft{{9, 9, 9}, {}, 0.0f};
  std::vector<DraftCandidate> candidates = {{0, &suffix_draft, 8}, {1, &lstm_draft, 3}};
  Sequence agent, chat, fresh_agent, fresh_chat;
  agent.request.speculation.ns = fresh_agent.request.speculation.ns = "agents";
  chat.request.speculation.ns = fresh_chat.request.speculation.ns = "chat";
  // The agent's suffix drafts are copied whole; the chat request's are
  // rejected at once, while its lstm drafts keep 1 or 2 of 3. A step's fixed
  // cost is 2 rows' worth here (a memory-bound step), so drafts pay.
  for (int i = 0; i < 20; ++i) {
    selector.Record(agent, 0, 8, 8);
    selector.Record(chat, 0, 8, 0);
    selector.Record(chat, 1, 3, i % 2 ? 1 : 2);
  }
  EXPECT_EQ(Pick(selector, agent, candidates, 2.0), 0);
  EXPECT_EQ(Pick(selector, chat, candidates, 2.0), 1);
  // A request's first drafts follow its namespace's record.
  EXPECT_EQ(Pick(selector, fresh_agent, candidates, 2.0), 0);
  EXPECT_EQ(Pick(selector, fresh_chat, candidates, 2.0), 1);
  EXPECT_GT(selector.Rate(agent, 0), 0.95);
  EXPECT_LT(selector.Rate(chat, 0), 0.1);
  // Another client's namespace or id never changes a request's own record.
  Sequence other;
  other.request.speculation.ns = "agents";
  for (int i = 0; i < 50; ++i) selector.Record(other, 0, 8, 0);
  EXPECT_GT(selector.Rate(agent, 0), 0.8);
  // A request whose every draft is rejected verifies none (with no draft a
  // step emits 1 token for 3 rows' cost), unless the cost model is off.
  Sequence hopeless;
  for (int i = 0; i < 20; ++i) {
    selector.Record(hopeless, 0, 8, 0);
    selector.Record(hopeless, 1, 3, 0);
  }
  EXPECT_EQ(Pick(selector, hopeless, candidates, 2.0), -1);
  EXPECT_GE(Pick(selector, hopeless, candidates, -1.0), 0);
  // Nothing measured yet: the optimistic prior tries a draft; one early
  // rejection of each does not stop a proposer from being measured.
  AcceptanceRateSelector fresh(2);
  EXPECT_EQ(Pick(fresh, Sequence{}, candidates, 2.0), 0);
  Sequence first;
  fresh.Record(first, 0, 8, 0);
  fresh.Record(first, 1, 3, 0);
  Sequence next;
  EXPECT_TRUE(fresh.MayChoose(next, 0, 8, 1.0));
  EXPECT_TRUE(fresh.MayChoose(next, 1, 3, 1.0));
  // A proposer judged hopeless is probed again after enough idle tokens.
  Sequence bad;
  for (int i = 0; i < 200; ++i) fresh.Record(bad, 1, 3, 0);
  Sequence later;
  EXPECT_FALSE(fresh.MayChoose(later, 1, 3, 1.0));
  for (int i = 0; i < 10; ++i) fresh.Age(4096);
  EXPECT_TRUE(fresh.MayChoose(later, 1, 3, 1.0));
  // ... and so is it for the request that ruled it out, as its own record
  // ages step by step.
  EXPECT_FALSE(fresh.MayChoose(bad, 1, 3, 1.0));
  bool retried = false;
  for (int step = 0; step < 200 && !retried; ++step) retried = fresh.MayChoose(bad, 1, 3, 1.0);
  EXPECT_TRUE(retried);
  // With the cost model off, the draft with the most expected tokens wins
  // (a long suffix draft at a = 0.7 over a short lstm one at 0.2), uncut.
  AcceptanceRateSelector open(2);
  Sequence mixed;
  for (int i = 0; i < 40; ++i) {
    open.Record(mixed, 0, 8, i % 10 < 7 ? 8 : 0);
    open.Record(mixed, 1, 3, i % 5 == 0 ? 1 : 0);
  }
  std::vector<DraftCandidate> both = candidates;
  EXPECT_EQ(open.Choose(mixed, both, -1.0), 0);
  EXPECT_EQ(both[0].length, 8);
  // A draft is cut to the length that pays best: at a ~ 0.5 and a fixed
  // cost of 2 rows, one token (~1.5 tokens for 4 rows) beats three (~1.875
  // for 6) and none (1 for 3).
  Sequence half;
  for (int i = 0; i < 20; ++i) selector.Record(half, 1, 2, 1);
  std::vector<DraftCandidate> lstm_only = {{1, &lstm_draft, 3}};
  ASSERT_EQ(selector.Choose(half, lstm_only, 2.0), 0);
  EXPECT_EQ(lstm_only[0].length, 1);
  EXPECT_TRUE(selector.MayChoose(half, 1, 3, 2.0));
  EXPECT_FALSE(selector.MayChoose(hopeless, 1, 3, 2.0));
  // Score-based selection keeps each proposer's own figure.
  HighestScoreSelector by_score;
  EXPECT_EQ(Pick(by_score, chat, candidates, 2.0), 0);
}

}  // namespace
}  // namespace floe
