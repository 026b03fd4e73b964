// Tree drafts (DraftProposal::parents) must be lossless like chains: greedy
// and seeded requests, batched and alone, generate exactly what they generate
// without speculation, whether the tree is fully accepted, fully rejected, or
// the target's path runs through a child that is not the first (so the
// accepted path's KV is copied into its chain slots); across stop tokens,
// max_tokens and the context limit; and the prefix cache only ever holds
// final tokens after a tree rollback.
#include <algorithm>

#include "services/worker/speculation/suffix_proposer.h"
#include "tests/services/worker/engine/engine_test_harness.h"
#include "tests/services/worker/speculation/test_proposers.h"

namespace floe {
namespace {

// A CPU backend without CopyKvSlots (like the CUDA backend): it keeps the
// default UNIMPLEMENTED, counts the trees it is sent and the most logits one
// sequence asked for (1 + the longest draft verified).
class NoKvCopyBackend final : public Backend {
 public:
  struct Seen {
    int trees = 0;
    int32_t max_logits = 0;
  };
  NoKvCopyBackend(std::unique_ptr<Backend> inner, Seen* seen) : inner_(std::move(inner)), seen_(seen) {}
  const ModelConfig& config() const override { return inner_->config(); }
  size_t KvBytesPerBlock(int block_size) const override { return inner_->KvBytesPerBlock(block_size); }
  absl::Status AllocateKvCache(int num_blocks, int block_size) override {
    return inner_->AllocateKvCache(num_blocks, block_size);
  }
  absl::Status Forward(std::span<const ForwardSequence> batch, float* logits) override {
    for (const ForwardSequence& seq : batch) {
      seen_->trees += seq.parents.empty() ? 0 : 1;
      seen_->max_logits = std::max(seen_->max_logits, seq.num_logits);
    }
    return inner_->Forward(batch, logits);
  }

 private:
  std::unique_ptr<Backend> inner_;
  Seen* seen_;
};

class TreeSpeculationTest : public EngineHarness {
 protected:
  static std::vector<EngineRequest> Batch(int count, bool seeded) {
    std::mt19937 rng(31);
    std::vector<EngineRequest> requests;
    for (int i = 0; i < count; ++i) {
      auto r = MakeRequest("r" + std::to_string(i), RandomPrompt(rng, 3 + i * 5), 13 + i % 5);
      if (seeded) MakeSeeded(r, 700 + i);
      if (i == 1) {
        r.logprobs = true;
        r.top_logprobs = 2;
      }
      requests.push_back(std::move(r));
    }
    return requests;
  }
  static EngineOptions SpecOptions(int k) {
    EngineOptions options = SpeculationOptions(k);
    options.speculative_step_overhead_tokens = -1;  // the trees' shapes stay as built
    return options;
  }
  static std::unique_ptr<EngineCore> TreeEngine(const std::map<std::string, Result>& want, TreeShape shape,
                                                EngineOptions options,
                                                std::unique_ptr<Backend> backend = nullptr) {
    std::vector<std::unique_ptr<Proposer>> p;
    p.push_back(std::make_unique<TreeOracleProposer>(want, shape));
    return MakeEngine(options, std::move(p), std::move(backend));
  }
  // fn(shape, requests, their plain-decoding reference) for every shape, on
  // a greedy and on a seeded batch of 5.
  template <class Fn>
  static void ForEveryShape(int k, const Fn& fn) {
    for (bool seeded : {false, true}) {
      auto requests = Batch(5, seeded);
      auto want = RunWithoutSpeculation(requests, SpecOptions(k));
      for (TreeShape shape : {TreeShape::kFirst, TreeShape::kSecond, TreeShape::kReject, TreeShape::kBroken}) {
        SCOPED_TRACE(testing::Message() << "shape " << static_cast<int>(shape) << (seeded ? " seeded" : " greedy"));
        fn(shape, requests, want);
      }
    }
  }
  static const SpeculationCounters& Only(const EngineCore& core) { return core.counters().speculation.at(0); }
};

TEST_F(TreeSpeculationTest, EveryShapeMatchesPlainDecodingBatchedAndAlone) {
  const int k = 9;
  ForEveryShape(k, [&](TreeShape shape, const std::vector<EngineRequest>& requests,
                       const std::map<std::string, Result>& want) {
    auto core = TreeEngine(want, shape, SpecOptions(k));
    ExpectSameTokens(Run(*core, requests), want);
    const SpeculationCounters& c = Only(*core);
    EXPECT_GT(c.drafts, 0);
    switch (shape) {
      case TreeShape::kFirst:  // 5 (first) or 3 (second) path nodes of 9; fewer near max_tokens
      case TreeShape::kSecond:
        EXPECT_GT(c.accepted_tokens, c.drafts);
        EXPECT_LT(core->counters().steps, core->counters().generated_tokens / 2);
        break;
      case TreeShape::kReject:
        EXPECT_EQ(c.accepted_tokens, 0);
        break;
      case TreeShape::kBroken:
        EXPECT_GT(c.accepted_per_position[1], 0);
        EXPECT_EQ(c.accepted_per_position[2], 0);
        break;
    }
    // Alone.
    const EngineRequest& r = requests[static_cast<int>(shape) % requests.size()];
    auto alone = TreeEngine(want, shape, SpecOptions(k));
    auto got = Run(*alone, {r});
    EXPECT_EQ(got[r.id].tokens, want.at(r.id).tokens);
    EXPECT_EQ(got[r.id].logprobs, want.at(r.id).logprobs);
    EXPECT_EQ(got[r.id].reason, want.at(r.id).reason);
  });
}

TEST_F(TreeSpeculationTest, WithoutKvCopyTheFirstRootPathIsVerifiedAsAChain) {
  // kFirst's first root path is the true continuation (5 of its 9 nodes);
  // kSecond's and kBroken's is a decoy and the true token under it (nothing
  // accepted); kReject's a decoy pair.
  const int k = 9;
  ForEveryShape(k, [&](TreeShape shape, const std::vector<EngineRequest>& requests,
                       const std::map<std::string, Result>& want) {
    NoKvCopyBackend::Seen seen;
    auto core = TreeEngine(want, shape, SpecOptions(k), std::make_unique<NoKvCopyBackend>(MakeCpuBackend(), &seen));
    ExpectSameTokens(Run(*core, requests), want);
    EXPECT_EQ(seen.trees, 0);
    const SpeculationCounters& c = Only(*core);
    EXPECT_GT(c.drafts, 0);
    if (shape == TreeShape::kFirst) {
      EXPECT_EQ(seen.max_logits, 1 + 5);
      EXPECT_GT(c.accepted_tokens, c.drafts);
      EXPECT_LT(core->counters().steps, core->counters().generated_tokens / 2);
    } else {
      EXPECT_EQ(seen.max_logits, 1 + 2);
      EXPECT_EQ(c.accepted_tokens, 0);
    }
  });
}

TEST_F(TreeSpeculationTest, TreesCrossingStopTokenMinTokensMaxTokensAndContext) {
  std::mt19937 rng(8);
  auto base = MakeRequest("base", RandomPrompt(rng, 9), 16);
  auto reference = RunWithoutSpeculation({base}, SpecOptions(0));
  ASSERT_EQ(reference["base"].tokens.size(), 16u);
  const std::vector<int32_t>& ref = reference["base"].tokens;
  for (int k : {5, 12}) {
    SCOPED_TRACE(k);
    for (const EngineRequest& r : StopRuleVariants(base, ref[3])) {
      auto want = RunWithoutSpeculation({r}, SpecOptions(k));
      // The trees carry the unstopped continuation through the stop token / max_tokens.
      auto core = TreeEngine({{r.id, reference["base"]}}, TreeShape::kSecond, SpecOptions(k));
      auto got = Run(*core, {r});
      EXPECT_EQ(got[r.id].tokens, want[r.id].tokens) << r.id;
      EXPECT_EQ(got[r.id].reason, want[r.id].reason) << r.id;
      EXPECT_GT(Only(*core).accepted_tokens, 0) << r.id;
    }
    // Context: 9 prompt tokens in a 20-token model; no draft slot reaches past it.
    auto context = base;
    context.id = "context";
    context.stop.max_tokens = 100;
    EngineOptions small = SpecOptions(k);
    small.max_model_len = 20;
    auto want = RunWithoutSpeculation({context}, small);
    ASSERT_EQ(want["context"].reason, FinishReason::kContext);
    auto core = TreeEngine({{"context", reference["base"]}}, TreeShape::kSecond, small);
    auto got = Run(*core, {context});
    EXPECT_EQ(got["context"].tokens, want["context"].tokens);
    EXPECT_EQ(got["context"].reason, FinishReason::kContext);
  }
}

TEST_F(TreeSpeculationTest, PrefixCacheHoldsOnlyFinalTokensAfterTreeRollback) {
  // Turn one is decoded with trees whose accepted path is never the first
  // child (KV copied into place) and which break at depth 2; turn two's prompt
  // is turn one's prompt + output and reuses the blocks turn one registered.
  // Stale (rejected or uncopied) KV there would change turn two's output.
  std::mt19937 rng(4);
  auto first = MakeRequest("t1", RandomPrompt(rng, 10), 20);
  auto first_want = RunAlone({first});
  auto second = first;
  second.id = "t2";
  second.prompt.insert(second.prompt.end(), first_want["t1"].tokens.begin(), first_want["t1"].tokens.end());
  second.stop.max_tokens = 8;
  auto second_want = RunAlone({second});
  for (TreeShape shape : {TreeShape::kSecond, TreeShape::kBroken}) {
    auto core = TreeEngine({{"t1", first_want["t1"]}, {"t2", second_want["t2"]}}, shape, SpecOptions(7));
    EXPECT_EQ(Run(*core, {first})["t1"].tokens, first_want["t1"].tokens);
    EXPECT_GT(Only(*core).accepted_tokens, 0);
    auto got = Run(*core, {second})["t2"];
    EXPECT_EQ(got.tokens, second_want["t2"].tokens);
    EXPECT_GE(got.cached_prompt_tokens, 24);
  }
}

TEST_F(TreeSpeculationTest, SuffixTreeDraftsAreLosslessAndDraftFromEarlierResponses) {
  std::mt19937 rng(9);
  auto a = MakeRequest("a", RandomPrompt(rng, 12), 24);
  auto want = RunAlone({a});
  SuffixProposerOptions options;
  options.params.use_tree_spec = true;
  std::vector<std::unique_ptr<Proposer>> p;
  p.push_back(std::make_unique<SuffixProposer>(options));
  auto core = MakeEngine(SpecOptions(6), std::move(p));
  EXPECT_EQ(Run(*core, {a})["a"].tokens, want["a"].tokens);
  auto c = a;
  c.id = "c";  // the global tree knows the whole response now
  const int64_t before = Only(*core).accepted_tokens;
  EXPECT_EQ(Run(*core, {c})["c"].tokens, want["a"].tokens);
  EXPECT_GE(Only(*core).accepted_tokens - before, 12);
}

}  // namespace
}  // namespace floe
