// Forced decoding (benchmarks): a request's forced tokens come out instead of
// sampled ones, with or without drafts, batched or alone, and drafts are
// judged against them exactly as the suffix replay does (oracle below: the
// same speculator driven by hand, the first token from the prefill step).
#include <algorithm>

#include "services/suffix_cache/suffix_tree/suffix_speculator.h"
#include "services/worker/speculation/ngram_proposer.h"
#include "services/worker/speculation/suffix_proposer.h"
#include "tests/services/worker/engine/engine_test_harness.h"

namespace floe {
namespace {

constexpr int kDraftTokens = 16;

class ForcedDecodingTest : public EngineHarness {
 protected:
  // Outputs that mostly copy stretches of their prompt (with edits), and
  // requests that share those stretches: what agents do.
  static std::vector<EngineRequest> AgentLikeRequests(int count) {
    std::mt19937 rng(5);
    const std::vector<int32_t> file = RandomPrompt(rng, 300);
    std::vector<EngineRequest> requests;
    for (int i = 0; i < count; ++i) {
      std::vector<int32_t> prompt = RandomPrompt(rng, 5);
      const int from = static_cast<int>(rng() % 100);
      prompt.insert(prompt.end(), file.begin() + from, file.begin() + from + 150);
      std::vector<int32_t> output(file.begin() + from, file.begin() + from + 120);
      for (int e = 0; e < 6; ++e) output[rng() % output.size()] = static_cast<int32_t>(rng() % 128000);
      auto r = MakeRequest("a" + std::to_string(i), prompt, static_cast<int>(output.size()));
      r.sampling.forced_tokens = output;
      requests.push_back(std::move(r));
    }
    return requests;
  }

  static std::unique_ptr<EngineCore> SuffixEngine() {
    EngineOptions options = SpeculationOptions(kDraftTokens);
    options.block_size = 16;
    options.speculative_step_overhead_tokens = -1;  // the replay drafts whatever it finds
    std::vector<std::unique_ptr<Proposer>> proposers;
    proposers.push_back(std::make_unique<SuffixProposer>(SuffixProposerOptions{}));
    return MakeEngine(options, std::move(proposers));
  }
};

TEST_F(ForcedDecodingTest, ForcedTokensComeOutWithAnyProposerBatchedOrAlone) {
  std::vector<EngineRequest> requests = AgentLikeRequests(6);
  requests[1].sampling.temperature = 0.8f;  // sampling settings do not matter
  requests[1].sampling.seed = 9;
  requests[1].seeded = true;
  for (const std::string mode : {"off", "ngram", "suffix"}) {
    for (bool together : {true, false}) {
      EngineOptions options = SpeculationOptions(mode == "off" ? 0 : kDraftTokens);
      options.block_size = 16;
      std::vector<std::unique_ptr<Proposer>> proposers;
      if (mode == "ngram") proposers.push_back(std::make_unique<NgramProposer>(NgramOptions{1, 4, kDraftTokens}));
      if (mode == "suffix") proposers.push_back(std::make_unique<SuffixProposer>(SuffixProposerOptions{}));
      auto core = MakeEngine(options, std::move(proposers));
      std::map<std::string, Result> results;
      if (together) {
        results = Run(*core, requests);
      } else {
        for (const EngineRequest& r : requests) results.merge(Run(*core, {r}));
      }
      for (const EngineRequest& r : requests) {
        SCOPED_TRACE(mode + (together ? " together " : " alone ") + r.id);
        EXPECT_EQ(results[r.id].tokens, r.sampling.forced_tokens);
        EXPECT_EQ(results[r.id].reason, FinishReason::kLength);
      }
      int64_t accepted = 0;
      for (const SpeculationCounters& c : core->counters().speculation) accepted += c.accepted_tokens;
      if (mode != "off") EXPECT_GT(accepted, 0) << "drafts must be judged against the forced tokens";
    }
  }
}

TEST_F(ForcedDecodingTest, StepsPerRequestMatchTheReplayOracle) {
  const std::vector<EngineRequest> requests = AgentLikeRequests(8);
  auto core = SuffixEngine();
  // The oracle: the suffix replay loop on an identically configured speculator.
  suffix_cache::SpeculatorConfig config;
  config.max_depth = SuffixProposerOptions{}.max_depth;
  config.max_cached_requests = SuffixProposerOptions{}.max_cached_requests;
  suffix_cache::SuffixSpeculator oracle(config);
  int64_t oracle_accepted = 0, oracle_drafted = 0;
  for (const EngineRequest& r : requests) {
    const std::vector<int32_t>& out = r.sampling.forced_tokens;
    const int n = static_cast<int>(out.size());
    std::vector<int32_t> context = r.prompt;
    ASSERT_TRUE(oracle.StartRequest(r.id, context).ok());
    // Step 1 is the prefill: one token, no draft.
    int steps = 1, i = 1;
    context.push_back(out[0]);
    ASSERT_TRUE(oracle.AppendTokens(r.id, absl::MakeConstSpan(out.data(), 1)).ok());
    while (i < n) {
      suffix_cache::DraftParams params;
      params.max_spec_tokens = std::min(kDraftTokens, n - i - 1);  // the engine never drafts past max_tokens
      std::vector<int32_t> draft;
      if (params.max_spec_tokens > 0) {
        auto d = oracle.Speculate(r.id, context, params);
        ASSERT_TRUE(d.ok());
        draft = d->token_ids;
      }
      int a = 0;
      while (a < static_cast<int>(draft.size()) && i + a < n && draft[a] == out[i + a]) ++a;
      oracle_drafted += static_cast<int64_t>(draft.size());
      oracle_accepted += a;
      const int e = std::min(a + 1, n - i);
      ASSERT_TRUE(oracle.AppendTokens(r.id, absl::MakeConstSpan(out.data() + i, e)).ok());
      context.insert(context.end(), out.begin() + i, out.begin() + i + e);
      i += e;
      ++steps;
    }
    ASSERT_TRUE(oracle.StopRequest(r.id).ok());

    auto result = Run(*core, {r});
    EXPECT_EQ(result[r.id].tokens, out) << r.id;
    EXPECT_EQ(result[r.id].outputs, steps) << r.id << ": engine steps (outputs) vs the replay oracle";
  }
  const SpeculationCounters& c = core->counters().speculation[0];
  EXPECT_EQ(c.accepted_tokens, oracle_accepted);
  EXPECT_EQ(c.draft_tokens, oracle_drafted);
  EXPECT_GT(oracle_accepted, 8 * 60) << "the workload should be mostly drafted";
}

}  // namespace
}  // namespace floe
