// Speculation under structured outputs stays lossless: with drafts cut to
// what each request's grammar allows (chains at their first forbidden
// token, trees node by node) and the bytes the grammar forces drafted for
// free, greedy and seeded constrained requests generate exactly what they
// generate without speculation, with every proposer (n-gram, in-process
// suffix tree, LSTM, oracles whose chains are accepted or broken midway, a
// tree oracle with decoy branches), batched and each alone.
#include <filesystem>

#include "services/worker/speculation/ngram_proposer.h"
#include "services/worker/speculation/suffix_proposer.h"
#include "services/worker/structured/structured_output_compiler.h"
#include "tests/services/worker/engine/engine_test_harness.h"
#include "tests/services/worker/speculation/test_proposers.h"
#include "tests/services/worker/structured/structured_test_util.h"

namespace floe {
namespace {

constexpr int kDraftTokens = 4;

class StructuredSpeculationTest : public EngineHarness {
 protected:
  static void SetUpTestSuite() {
    EngineHarness::SetUpTestSuite();
    speculator_dir_ = new std::string(dir_->string() + "_speculator");
    WriteTestSpeculator(checkpoint_->config(), *speculator_dir_);
  }
  // Without the vocabulary (its reference files missing) nothing compiles.
  void SetUp() override { ASSERT_NE(structured_testing::Llama3Vocab(), nullptr); }
  static void TearDownTestSuite() {
    std::filesystem::remove_all(*speculator_dir_);
    delete speculator_dir_;
    EngineHarness::TearDownTestSuite();
  }

  // Two requests per constraint, their prompts repeating a motif (so prompt
  // lookup and suffix trees find drafts, which the grammar mostly cuts).
  static std::vector<EngineRequest> Requests(bool seeded) {
    StructuredOutputCompiler compiler(structured_testing::Llama3Vocab(), {});
    std::mt19937 rng(17);
    std::vector<EngineRequest> requests;
    for (const auto& c : structured_testing::Constraints()) {
      auto compiled = compiler.Compile(c.output);
      EXPECT_TRUE(compiled.ok()) << c.name << ": " << compiled.status();
      if (!compiled.ok()) continue;
      for (int i = 0; i < 2; ++i) {
        const auto motif = RandomPrompt(rng, 3 + i);
        std::vector<int32_t> prompt;
        for (int rep = 0; rep < 3; ++rep) prompt.insert(prompt.end(), motif.begin(), motif.end());
        EngineRequest r = MakeRequest(c.name + "/" + std::to_string(i), prompt, 24 + 8 * i);
        r.stop.ignore_eos = false;
        if (seeded) {
          r.sampling.temperature = 1.0f;
          r.sampling.seed = 300 + requests.size();
          r.seeded = true;
        }
        r.grammar = compiled->grammar;
        requests.push_back(std::move(r));
      }
    }
    return requests;
  }

  static std::unique_ptr<Proposer> Make(const std::string& kind, const std::map<std::string, Result>& want) {
    if (kind == "ngram") return std::make_unique<NgramProposer>(NgramOptions{1, 3, kDraftTokens});
    if (kind == "suffix") return std::make_unique<SuffixProposer>(SuffixProposerOptions{});
    if (kind == "lstm") return LoadTestLstm(checkpoint_->config(), *speculator_dir_);
    if (kind == "accept") return std::make_unique<OracleProposer>(want, -1);
    if (kind == "middle") return std::make_unique<OracleProposer>(want, kDraftTokens / 2);
    return std::make_unique<TreeOracleProposer>(want, TreeShape::kSecond);  // "tree"
  }
  static std::unique_ptr<EngineCore> SpeculativeEngine(const std::string& kind,
                                                       const std::map<std::string, Result>& want) {
    std::vector<std::unique_ptr<Proposer>> p;
    p.push_back(Make(kind, want));
    return MakeEngine(SpeculationOptions(kDraftTokens), std::move(p));
  }

  static std::string* speculator_dir_;
};

std::string* StructuredSpeculationTest::speculator_dir_ = nullptr;

TEST_F(StructuredSpeculationTest, EveryProposerMatchesConstrainedDecodingBatchedAndAlone) {
  StructuredOutputCounters total;
  for (bool seeded : {false, true}) {
    const std::vector<EngineRequest> requests = Requests(seeded);
    ASSERT_EQ(requests.size(), 2 * structured_testing::Constraints().size());
    const auto want = RunWithoutSpeculation(requests, SpeculationOptions(kDraftTokens));
    ExpectSameTokens(RunAlone(requests), want);
    for (const std::string kind : {"ngram", "suffix", "lstm", "accept", "middle", "tree"}) {
      SCOPED_TRACE(kind + (seeded ? " seeded" : " greedy"));
      auto core = SpeculativeEngine(kind, want);
      ExpectSameTokens(Run(*core, requests), want);
      const StructuredOutputCounters& c = core->counters().structured_output;
      total.forced_draft_tokens += c.forced_draft_tokens;
      total.forced_draft_accepted += c.forced_draft_accepted;
      total.draft_tokens_cut += c.draft_tokens_cut;
      EXPECT_LE(c.forced_draft_accepted, c.forced_draft_tokens);
      EXPECT_EQ(c.dead_ends, 0);
      if (kind == "accept") {  // the true continuation: only its EOS (or past it) is ever cut
        EXPECT_GT(core->counters().speculation[0].accepted_tokens, 0);
      }
    }
    {  // Without the grammar's help drafts are verified as proposed: as lossless.
      SCOPED_TRACE(std::string("middle, no grammar drafts") + (seeded ? " seeded" : " greedy"));
      EngineOptions options = SpeculationOptions(kDraftTokens);
      options.grammar_drafts = false;
      std::vector<std::unique_ptr<Proposer>> p;
      p.push_back(Make("middle", want));
      auto core = MakeEngine(options, std::move(p));
      ExpectSameTokens(Run(*core, requests), want);
      const StructuredOutputCounters& c = core->counters().structured_output;
      EXPECT_EQ(c.forced_draft_tokens, 0);
      EXPECT_EQ(c.draft_tokens_cut, 0);
      EXPECT_GT(core->counters().speculation[0].draft_tokens, 0);
    }
    // Each request alone on a speculative engine, too.
    for (const std::string kind : {"suffix", "middle"}) {
      SCOPED_TRACE(kind + " alone" + (seeded ? " seeded" : " greedy"));
      std::map<std::string, Result> alone;
      for (const EngineRequest& r : requests) {
        auto core = SpeculativeEngine(kind, want);
        alone[r.id] = Run(*core, {r})[r.id];
      }
      ExpectSameTokens(alone, want);
    }
  }
  // The grammar did its part: it forced bytes that were drafted (and some
  // accepted), and it cut proposers' drafts it forbids.
  EXPECT_GT(total.forced_draft_tokens, 0);
  EXPECT_GT(total.forced_draft_accepted, 0);
  EXPECT_GT(total.draft_tokens_cut, 0);
  RecordProperty("forced_draft_tokens", total.forced_draft_tokens);
  RecordProperty("forced_draft_accepted", total.forced_draft_accepted);
  RecordProperty("draft_tokens_cut", total.draft_tokens_cut);
}

}  // namespace
}  // namespace floe
