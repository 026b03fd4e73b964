// Speculative decoding must be lossless: with any proposer (n-gram, suffix,
// or a test oracle whose drafts are fully accepted, fully rejected or
// rejected in the middle), batched or alone, greedy and seeded requests
// generate exactly what they generate without speculation, stop at the same
// token for every stop rule, and leave every KV block free and consistent.
#include <algorithm>
#include <numeric>

#include "services/worker/speculation/ngram_proposer.h"
#include "services/worker/speculation/suffix_proposer.h"
#include "tests/services/worker/engine/engine_test_harness.h"
#include "tests/services/worker/speculation/test_proposers.h"

namespace floe {
namespace {

// What a model-based speculator (an LSTM head over the target's hidden
// state) sees: records each sequence's tokens and last_hidden, and takes its
// drafts from `drafts`.
class HiddenStateRecorder final : public Proposer {
 public:
  struct Seen {
    std::vector<int32_t> tokens;
    std::vector<float> hidden;
  };
  HiddenStateRecorder(std::unique_ptr<Proposer> drafts, bool wants) : drafts_(std::move(drafts)), wants_(wants) {}
  std::string_view name() const override { return "hidden"; }
  bool wants_last_hidden() const override { return wants_; }
  void Propose(std::span<const SpecSequence> batch, std::span<DraftProposal> out) override {
    for (const SpecSequence& s : batch) {
      seen_.push_back({{s.tokens.begin(), s.tokens.end()}, {s.last_hidden.begin(), s.last_hidden.end()}});
    }
    drafts_->Propose(batch, out);
  }
  const std::vector<Seen>& seen() const { return seen_; }

 private:
  std::unique_ptr<Proposer> drafts_;
  bool wants_;
  std::vector<Seen> seen_;
};

// Chat requests (24 tokens each), then an agent (48), in the default
// namespace, with their outputs without speculation.
struct ChatsThenAgent {
  std::vector<EngineRequest> chats;
  EngineRequest agent;
  std::map<std::string, Result> want;
};

class SpeculativeDecodingTest : public EngineHarness {
 protected:
// Prompts that repeat themselves, so prompt lookup and suffix trees find drafts.
  static std::vector<EngineRequest> RepetitiveBatch(int count, bool seeded) {
  std::mt19937 rng(21);
  std::vector<EngineRequest> requests;
  for (int i = 0; i < count; ++i) {
    auto motif = RandomPrompt(rng, 3 + i % 4);
    std::vector<int32_t> prompt;
    for (int rep = 0; rep < 4; ++rep) prompt.insert(prompt.end(), motif.begin(), motif.end());
    auto r = MakeRequest("r" + std::to_string(i), prompt, 14 + i % 5);
    if (seeded) MakeSeeded(r, 500 + i);
    if (i == 1) {
      r.logprobs = true;
      r.top_logprobs = 2;
    }
    requests.push_back(std::move(r));
  }
  return requests;
}

  static EngineOptions SpecOptions(int k) { return SpeculationOptions(k); }
  static std::unique_ptr<Proposer> MakeProposer(const std::string& kind, const std::map<std::string, Result>& want,
                                                int k) {
    if (kind == "ngram") return std::make_unique<NgramProposer>(NgramOptions{1, 3, k});
    if (kind == "suffix") return std::make_unique<SuffixProposer>(SuffixProposerOptions{});
    if (kind == "accept") return std::make_unique<OracleProposer>(want, -1);
    if (kind == "reject") return std::make_unique<OracleProposer>(want, 0);
    return std::make_unique<OracleProposer>(want, k / 2);  // "middle"
  }
  static const SpeculationCounters& Only(const EngineCore& core) { return core.counters().speculation.at(0); }
  static ChatsThenAgent MakeChatsThenAgent(unsigned seed, int num_chats, const EngineOptions& options) {
    std::mt19937 rng(seed);
    ChatsThenAgent w;
    for (int i = 0; i < num_chats; ++i)
      w.chats.push_back(MakeRequest("chat-" + std::to_string(i), RandomPrompt(rng, 10), 24));
    w.agent = MakeRequest("agent", RandomPrompt(rng, 10), 48);
    std::vector<EngineRequest> all = w.chats;
    all.push_back(w.agent);
    w.want = RunWithoutSpeculation(all, options);
    return w;
  }
};

TEST_F(SpeculativeDecodingTest, EveryProposerMatchesPlainDecodingBatchedAndAlone) {
  for (bool seeded : {false, true}) {
    auto requests = RepetitiveBatch(5, seeded);
    const int k = 4;
    auto want = RunWithoutSpeculation(requests, SpecOptions(k));
    for (const std::string kind : {"ngram", "suffix", "accept", "reject", "middle"}) {
      SCOPED_TRACE(kind + (seeded ? " seeded" : " greedy"));
      std::vector<std::unique_ptr<Proposer>> p;
      p.push_back(MakeProposer(kind, want, k));
      auto core = MakeEngine(SpecOptions(k), std::move(p));
      ExpectSameTokens(Run(*core, requests), want);
      const SpeculationCounters& c = Only(*core);
      EXPECT_EQ(c.proposer, kind == "ngram" || kind == "suffix" ? kind : "oracle");
      // A random model's seeded samples hardly ever repeat, so only greedy
      // output gives prompt lookup and suffix trees something to draft from.
      if (!seeded || c.proposer == "oracle") EXPECT_GT(c.drafts, 0);
      if (kind == "accept") EXPECT_EQ(c.accepted_tokens, c.draft_tokens);
      if (kind == "reject") EXPECT_EQ(c.accepted_tokens, 0);
      if (kind == "middle") {
        EXPECT_GT(c.accepted_per_position[0], 0);
        EXPECT_EQ(c.accepted_per_position[k / 2], 0);
      }
      if (kind == "accept") {
        // Several tokens per output: fewer steps than tokens.
        EXPECT_LT(core->counters().steps, core->counters().generated_tokens);
      }
    }
    // Alone: one request per engine, every proposer.
    for (const std::string kind : {"ngram", "suffix", "accept", "reject", "middle"}) {
      const EngineRequest& r = requests[kind.size() % requests.size()];
      std::vector<std::unique_ptr<Proposer>> p;
      p.push_back(MakeProposer(kind, want, k));
      auto core = MakeEngine(SpecOptions(k), std::move(p));
      auto got = Run(*core, {r});
      EXPECT_EQ(got[r.id].tokens, want[r.id].tokens) << kind;
      EXPECT_EQ(got[r.id].logprobs, want[r.id].logprobs) << kind;
      EXPECT_EQ(got[r.id].reason, want[r.id].reason) << kind;
    }
  }
}

TEST_F(SpeculativeDecodingTest, DraftsCrossingStopTokenMinTokensMaxTokensAndContext) {
  std::mt19937 rng(8);
  auto base = MakeRequest("base", RandomPrompt(rng, 9), 16);
  auto reference = RunWithoutSpeculation({base}, SpecOptions(0));
  ASSERT_EQ(reference["base"].tokens.size(), 16u);
  const std::vector<int32_t>& ref = reference["base"].tokens;

  const std::vector<EngineRequest> stop_variants = StopRuleVariants(base, ref[3]);
  auto context = base;
  context.id = "context";
  context.stop.max_tokens = 100;

  for (int k : {3, 8}) {
    SCOPED_TRACE(k);
    for (const EngineRequest& r : stop_variants) {
      auto want = RunWithoutSpeculation({r}, SpecOptions(k));
      // The oracle drafts the unstopped continuation, so every draft runs
      // straight through the stop token / max_tokens.
      std::map<std::string, Result> oracle = {{r.id, reference["base"]}};
      std::vector<std::unique_ptr<Proposer>> p;
      p.push_back(std::make_unique<OracleProposer>(oracle, -1));
      auto core = MakeEngine(SpecOptions(k), std::move(p));
      auto got = Run(*core, {r});
      EXPECT_EQ(got[r.id].tokens, want[r.id].tokens) << r.id;
      EXPECT_EQ(got[r.id].reason, want[r.id].reason) << r.id;
      EXPECT_GT(Only(*core).accepted_tokens, 0) << r.id;
    }
    // Context: 9 prompt tokens in a 20-token model; drafts never reach past it.
    EngineOptions small = SpecOptions(k);
    small.max_model_len = 20;
    auto want = RunWithoutSpeculation({context}, small);
    ASSERT_EQ(want["context"].reason, FinishReason::kContext);
    ASSERT_EQ(want["context"].tokens.size(), 11u);
    std::map<std::string, Result> oracle = {{"context", reference["base"]}};
    std::vector<std::unique_ptr<Proposer>> p;
    p.push_back(std::make_unique<OracleProposer>(oracle, -1));
    auto core = MakeEngine(small, std::move(p));
    auto got = Run(*core, {context});
    EXPECT_EQ(got["context"].tokens, want["context"].tokens);
    EXPECT_EQ(got["context"].reason, FinishReason::kContext);
  }
  auto stop_want = RunWithoutSpeculation({stop_variants[0]}, SpecOptions(0));
  EXPECT_EQ(stop_want["base"].reason, FinishReason::kStop);
}

TEST_F(SpeculativeDecodingTest, PrefixCacheHoldsOnlyFinalTokensAfterRollback) {
  // A first turn decoded with drafts rejected in the middle; the next turn's
  // prompt is the first turn's prompt + output and hits the blocks it
  // registered. Any stale (rejected) KV there would change the second output.
  std::mt19937 rng(4);
  auto first = MakeRequest("t1", RandomPrompt(rng, 10), 20);
  auto first_want = RunAlone({first});
  auto second = first;
  second.id = "t2";
  second.prompt.insert(second.prompt.end(), first_want["t1"].tokens.begin(), first_want["t1"].tokens.end());
  second.stop.max_tokens = 8;
  auto second_want = RunAlone({second});

  std::map<std::string, Result> oracle = {{"t1", first_want["t1"]}, {"t2", second_want["t2"]}};
  std::vector<std::unique_ptr<Proposer>> p;
  p.push_back(std::make_unique<OracleProposer>(oracle, 2));
  auto core = MakeEngine(SpecOptions(5), std::move(p));
  EXPECT_EQ(Run(*core, {first})["t1"].tokens, first_want["t1"].tokens);
  auto got = Run(*core, {second})["t2"];
  EXPECT_EQ(got.tokens, second_want["t2"].tokens);
  EXPECT_GE(got.cached_prompt_tokens, 24);
}

TEST_F(SpeculativeDecodingTest, BlockPressureDropsDraftsAndPreemptsLosslessly) {
  auto requests = RepetitiveBatch(6, /*seeded=*/false);
  EngineOptions options = SpecOptions(8);
  options.num_blocks = 28;
  options.enable_prefix_caching = false;
  auto want = RunWithoutSpeculation(requests, SpecOptions(8));
  std::vector<std::unique_ptr<Proposer>> p;
  p.push_back(std::make_unique<OracleProposer>(want, 5));
  auto core = MakeEngine(options, std::move(p));
  ExpectSameTokens(Run(*core, requests), want);
  EXPECT_GT(core->counters().preemptions, 0);
  EXPECT_GT(Only(*core).accepted_tokens, 0);
}

TEST_F(SpeculativeDecodingTest, DraftBudgetShrinksWithLoadAndRequestsMayOptOut) {
  auto requests = RepetitiveBatch(4, /*seeded=*/false);
  auto want = RunWithoutSpeculation(requests, SpecOptions(4));
  auto run_with = [&](int threshold, bool opt_out) {
    EngineOptions options = SpecOptions(4);
    options.speculative_token_threshold = threshold;
    std::vector<std::unique_ptr<Proposer>> p;
    p.push_back(std::make_unique<OracleProposer>(want, -1));
    auto core = MakeEngine(options, std::move(p));
    auto batch = requests;
    for (auto& r : batch) r.speculation.disable = opt_out;
    ExpectSameTokens(Run(*core, batch), want);
    return Only(*core);
  };
  EXPECT_EQ(run_with(0, false).draft_tokens, 0);
  // While all 4 decode, a threshold of 4 leaves no room for drafts (they
  // start as requests finish) and one of 6 leaves 2 draft tokens a step.
  SpeculationCounters none_at_full_load = run_with(4, false);
  SpeculationCounters some = run_with(6, false);
  EXPECT_GT(some.draft_tokens, none_at_full_load.draft_tokens);
  SpeculationCounters all = run_with(1 << 20, false);
  EXPECT_GT(all.draft_tokens, some.draft_tokens);
  EXPECT_EQ(run_with(1 << 20, true).draft_tokens, 0);
}

// Drafts are the one per-step input from outside the engine (a suffix cache
// may hold another model's ids): one with an id outside the vocabulary is
// dropped whole, never run, and the output is plain decoding's.
TEST_F(SpeculativeDecodingTest, DraftsOutsideTheVocabularyAreDroppedNotRun) {
  class OutOfVocabulary final : public Proposer {
   public:
    std::string_view name() const override { return "bad-ids"; }
    void Propose(std::span<const SpecSequence> batch, std::span<DraftProposal> out) override {
      for (size_t i = 0; i < batch.size(); ++i) {
        out[i].tokens = {1, (i % 2) ? -5 : (1 << 30), 2};
        out[i].score = 1.0f;
      }
    }
  };
  auto requests = RepetitiveBatch(4, /*seeded=*/true);
  auto want = RunWithoutSpeculation(requests, SpecOptions(4));
  std::vector<std::unique_ptr<Proposer>> p;
  p.push_back(std::make_unique<OutOfVocabulary>());
  EngineOptions options = SpecOptions(4);
  options.speculative_step_overhead_tokens = -1;  // no cost model: every draft would be verified
  auto core = MakeEngine(options, std::move(p));
  ExpectSameTokens(Run(*core, requests), want);
  EXPECT_EQ(Only(*core).draft_tokens, 0);
}

TEST_F(SpeculativeDecodingTest, SuffixProposerDraftsFromEarlierResponsesPerNamespace) {
  std::mt19937 rng(9);
  auto prompt = RandomPrompt(rng, 12);
  auto a = MakeRequest("a", prompt, 24);
  auto want = RunAlone({a});
  std::vector<std::unique_ptr<Proposer>> p;
  p.push_back(std::make_unique<SuffixProposer>(SuffixProposerOptions{}));
  auto core = MakeEngine(SpecOptions(6), std::move(p));
  a.speculation.ns = "tenant-1";
  EXPECT_EQ(Run(*core, {a})["a"].tokens, want["a"].tokens);
  const int64_t accepted_first = Only(*core).accepted_tokens;
  // Same prompt, other namespace: nothing from the first response.
  auto b = a;
  b.id = "b";
  b.speculation.ns = "tenant-2";
  EXPECT_EQ(Run(*core, {b})["b"].tokens, want["a"].tokens);
  const int64_t accepted_other = Only(*core).accepted_tokens - accepted_first;
  // Same namespace: the global tree knows the whole response.
  auto c = a;
  c.id = "c";
  EXPECT_EQ(Run(*core, {c})["c"].tokens, want["a"].tokens);
  const int64_t accepted_same = Only(*core).accepted_tokens - accepted_first - accepted_other;
  EXPECT_GT(accepted_same, accepted_other);
  EXPECT_GE(accepted_same, 12);
}

// Drafts from the reference for requests named "agent*", always wrong
// (every token off by one) for the others.
class AgentChatProposer final : public Proposer {
 public:
  // `calibrated`: scores are expected accepted tokens (sure for agents,
  // zero for chat), as a suffix tree's are. `chat_overclaims`: chat drafts
  // are 2 tokens and claim both, as a suffix tree's after a short match
  // seen once do.
  explicit AgentChatProposer(std::map<std::string, Result> reference, bool calibrated = false,
                             bool chat_overclaims = false)
      : reference_(std::move(reference)), calibrated_(calibrated), chat_overclaims_(chat_overclaims) {}
  std::string_view name() const override { return "agent-chat"; }
  bool scores_expected_accepted() const override { return calibrated_; }
  void Propose(std::span<const SpecSequence> batch, std::span<DraftProposal> out) override {
    for (size_t i = 0; i < batch.size(); ++i) {
      const std::string id(batch[i].request_id);
      const std::vector<int32_t>& want = reference_.at(id).tokens;
      const size_t produced = batch[i].tokens.size() - batch[i].prompt_len;
      const bool agent = id.rfind("agent", 0) == 0;
      const int length = agent || !chat_overclaims_ ? batch[i].max_draft : std::min(2, batch[i].max_draft);
      for (int j = 0; j < length; ++j) {
        int32_t t = produced + j < want.size() ? want[produced + j] : 7;
        if (!agent) t = (t + 1) % 128000;
        out[i].tokens.push_back(t);
      }
      out[i].score = agent || chat_overclaims_ ? static_cast<float>(out[i].tokens.size()) : 0.0f;
    }
  }

 private:
  std::map<std::string, Result> reference_;
  bool calibrated_;
  bool chat_overclaims_;
};

// Draft budgets follow each request's own acceptance: an agent session whose
// drafts are always right keeps drafting k tokens while chat requests beside
// it in the same batch, whose drafts are always wrong, stop after a probe or
// two (pooled statistics would have switched the agent off too).
TEST_F(SpeculativeDecodingTest, DraftBudgetsFollowEachRequestsOwnAcceptance) {
  std::mt19937 rng(5);
  std::vector<EngineRequest> requests;
  for (const char* id : {"agent", "chat-1", "chat-2", "chat-3"}) {
    requests.push_back(MakeRequest(id, RandomPrompt(rng, 10), 48));
    requests.back().speculation.ns = std::string(id).substr(0, 4);
  }
  EngineOptions options = SpecOptions(8);  // the default cost model: the line 1 + N
  auto want = RunWithoutSpeculation(requests, options);
  std::vector<std::unique_ptr<Proposer>> p;
  p.push_back(std::make_unique<AgentChatProposer>(want));
  auto core = MakeEngine(options, std::move(p));
  auto got = Run(*core, requests);
  ExpectSameTokens(got, want);
  const SpeculationCounters& c = Only(*core);
  // The agent's 48 tokens come in steps of up to 9.
  EXPECT_LE(got["agent"].outputs, 10) << "the agent kept its drafts";
  EXPECT_GE(c.accepted_tokens, 38);
  // Each chat request verifies a draft or two (probes of up to k tokens)
  // before its own rate (shrunk towards its namespace's, then all
  // requests') rules drafts out; the agent drafted in at most all its steps.
  EXPECT_LE(c.drafts, got["agent"].outputs + 3 * 2) << "chat requests kept drafting";
  EXPECT_LE(c.draft_tokens - c.accepted_tokens, 3 * 2 * 8);
  EXPECT_EQ(got["chat-1"].outputs, 48);
}

// A namespace whose chat requests drafted badly reads a low rate, so a new
// request in it would never draft; a proposer that scores its draft as
// expected accepted tokens (a suffix tree that has seen the answer) sets a
// surer prior for that draft, and an agent request re-asking drafts again.
TEST_F(SpeculativeDecodingTest, ASureDraftOutweighsABadNamespacePrior) {
  const EngineOptions options = SpecOptions(8);
  auto [chats, agent, want] = MakeChatsThenAgent(6, 4, options);
  for (bool calibrated : {false, true}) {
    SCOPED_TRACE(calibrated ? "calibrated scores" : "uncalibrated scores");
    std::vector<std::unique_ptr<Proposer>> p;
    p.push_back(std::make_unique<AgentChatProposer>(want, calibrated));
    auto core = MakeEngine(options, std::move(p));
    auto first = Run(*core, chats);  // same namespace (the default): its rate falls
    auto second = Run(*core, {agent});
    EXPECT_EQ(second["agent"].tokens, want["agent"].tokens);
    if (calibrated) {
      EXPECT_LE(second["agent"].outputs, 10) << "the sure draft was verified";
    } else {
      EXPECT_GT(second["agent"].outputs, 40) << "the namespace's low rate ruled drafts out";
    }
  }
}

// A suffix tree claims its whole draft after a short match seen once (chat),
// and is about right after long ones (an agent copying). Claims are
// discounted by how the namespace's earlier claims of that length came out:
// after chat requests whose sure 2-token drafts all failed, a new chat
// request hardly drafts, while an agent's sure 8-token drafts in the same
// namespace still pay.
TEST_F(SpeculativeDecodingTest, OverclaimedScoresAreDiscountedByTheirRecord) {
  const EngineOptions options = SpecOptions(8);
  auto [chats, agent, want] = MakeChatsThenAgent(7, 5, options);
  std::vector<std::unique_ptr<Proposer>> p;
  p.push_back(std::make_unique<AgentChatProposer>(want, /*calibrated=*/true, /*chat_overclaims=*/true));
  auto core = MakeEngine(options, std::move(p));
  const std::vector<EngineRequest> earlier(chats.begin(), chats.end() - 1);
  auto first = Run(*core, earlier);
  const int64_t drafts_before = Only(*core).drafts;
  EXPECT_GE(drafts_before, 4) << "the chat requests never believed their claims";
  auto last = Run(*core, {chats.back()});
  EXPECT_EQ(last[chats.back().id].tokens, want[chats.back().id].tokens);
  EXPECT_LE(Only(*core).drafts - drafts_before, 1) << "the namespace's record of failed 2-token claims was ignored";
  auto second = Run(*core, {agent});
  EXPECT_EQ(second["agent"].tokens, want["agent"].tokens);
  EXPECT_LE(second["agent"].outputs, 10) << "the agent's 8-token claims, right so far, were discounted too";
}

// With measure_step_cost the engine times its backend at creation (1, 2, 4,
// ... 64 tokens: a non-decreasing curve) and plans on it; output is still
// exactly plain decoding's. Whether drafts pay on the curve it measured
// depends on how busy the host was while it timed (a stall at 8 tokens makes
// them dear), so this checks the measurement, that the plan asked for drafts
// and that the output is lossless; DraftsPayOnAForwardOnlyCurvePlusObservedOverhead
// checks what is drafted on a pinned curve planned the same way.
TEST_F(SpeculativeDecodingTest, MeasuredStepCostCurvePlansLosslessly) {
  auto requests = RepetitiveBatch(4, /*seeded=*/false);
  EngineOptions options = SpecOptions(8);
  auto want = RunWithoutSpeculation(requests, options);
  options.measure_step_cost = true;
  auto oracle = std::make_unique<OracleProposer>(want, 1000);
  const OracleProposer* asked = oracle.get();
  std::vector<std::unique_ptr<Proposer>> p;
  p.push_back(std::move(oracle));
  auto core = MakeEngine(options, std::move(p));
  const auto& curve = core->options().speculative_step_cost_curve;
  ASSERT_EQ(curve.size(), 7u);
  for (size_t i = 0; i < curve.size(); ++i) {
    EXPECT_EQ(curve[i].first, 1 << i);
    EXPECT_GT(curve[i].second, 0.0);
    if (i > 0) EXPECT_GE(curve[i].second, curve[i - 1].second);
  }
  ExpectSameTokens(Run(*core, requests), want);
  EXPECT_GT(asked->calls(), 0) << "the plan never asked for a draft";
  // Without proposers nothing is measured (speculation is off).
  EngineOptions plain = SpecOptions(8);
  plain.measure_step_cost = true;
  EXPECT_TRUE(MakeEngine(plain)->options().speculative_step_cost_curve.empty());
}

// A given curve with measure_step_cost is planned on as a measured one (what
// a worker that timed its forward at start has): it times the forward alone,
// and each step's observed time outside the forward is added to it. That
// overhead is this host's, but it only makes a draft token cheaper relative
// to the step, so right drafts that pay on the pinned curve pay on any host.
TEST_F(SpeculativeDecodingTest, DraftsPayOnAForwardOnlyCurvePlusObservedOverhead) {
  auto requests = RepetitiveBatch(4, /*seeded=*/false);
  EngineOptions options = SpecOptions(8);
  auto want = RunWithoutSpeculation(requests, options);
  // A tiny model's forward on a CPU: nearly flat to 8 tokens, then linear.
  const std::vector<std::pair<int, double>> pinned = {{1, 1.0},  {2, 1.0},  {4, 1.05}, {8, 1.2},
                                                      {16, 1.8}, {32, 3.0}, {64, 5.4}};
  options.measure_step_cost = true;
  options.speculative_step_cost_curve = pinned;
  std::vector<std::unique_ptr<Proposer>> p;
  p.push_back(std::make_unique<OracleProposer>(want, 1000));
  auto core = MakeEngine(options, std::move(p));
  EXPECT_EQ(core->options().speculative_step_cost_curve, pinned) << "a given curve is not measured again";
  ExpectSameTokens(Run(*core, requests), want);
  const SpeculationCounters& c = Only(*core);
  EXPECT_GT(c.accepted_tokens, 0) << "right drafts did not pay on a curve with a fixed cost";
  EXPECT_EQ(c.accepted_tokens, c.draft_tokens);  // the oracle is never wrong
  // Several tokens per output: fewer steps than tokens.
  EXPECT_LT(core->counters().steps, core->counters().generated_tokens);
}

// The hidden state a proposer receives is the target's at the position that
// produced the sequence's newest token, also when that token came out of a
// verified draft (row 2 of every verification here): bit-identical to the
// last row of a fresh prefill over the tokens before it (the CPU backend is
// batch- and chunk-invariant). A proposer that does not ask gets none.
TEST_F(SpeculativeDecodingTest, ProposersThatAskGetTheTargetsLastHiddenState) {
  auto requests = RepetitiveBatch(4, /*seeded=*/false);
  auto want = RunWithoutSpeculation(requests, SpecOptions(4));
  for (bool wants : {true, false}) {
    auto recorder = std::make_unique<HiddenStateRecorder>(std::make_unique<OracleProposer>(want, 2), wants);
    const HiddenStateRecorder* view = recorder.get();
    std::vector<std::unique_ptr<Proposer>> p;
    p.push_back(std::move(recorder));
    EngineOptions options = SpecOptions(4);
    // Every step drafts (2 of 4 tokens accepted would read as a rate of 2/3,
    // which the cost model at batch 4 declines).
    options.speculative_step_overhead_tokens = -1;
    auto core = MakeEngine(options, std::move(p));
    ExpectSameTokens(Run(*core, requests), want);
    ASSERT_GT(Only(*core).accepted_tokens, 0);
    ASSERT_GE(view->seen().size(), 8u);
    if (!wants) {
      for (const auto& seen : view->seen()) EXPECT_TRUE(seen.hidden.empty());
      continue;
    }
    auto backend = MakeCpuBackend();
    const int block_size = 16, blocks = 8;
    ASSERT_TRUE(backend->AllocateKvCache(blocks, block_size).ok());
    std::vector<int32_t> table(blocks);
    std::iota(table.begin(), table.end(), 0);
    for (const auto& seen : view->seen()) {
      ASSERT_EQ(seen.hidden.size(), static_cast<size_t>(backend->config().hidden_size));
      const std::span<const int32_t> before_newest(seen.tokens.data(), seen.tokens.size() - 1);
      ASSERT_LE(before_newest.size(), static_cast<size_t>(blocks * block_size));
      ForwardSequence f{before_newest, 0, table, 1};
      std::vector<float> logits(backend->config().vocab_size);
      ASSERT_TRUE(backend->Forward({&f, 1}, logits.data()).ok());
      const std::span<const float> fresh = backend->LastHiddenStates();
      EXPECT_TRUE(std::equal(fresh.begin(), fresh.end(), seen.hidden.begin(), seen.hidden.end()))
          << "after " << seen.tokens.size() << " tokens";
    }
  }
}

}  // namespace
}  // namespace floe
