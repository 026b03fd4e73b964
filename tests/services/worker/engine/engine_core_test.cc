// The engine on the real CPU backend and a tiny random Llama checkpoint:
// batching, chunked prefill, prefix caching and preemption must never change
// what a request generates (greedy or seeded), and limits must hold.
#include "services/worker/engine/engine_core.h"

#include "tests/services/worker/engine/engine_test_harness.h"

namespace floe {
namespace {

using EngineCoreTest = EngineHarness;

TEST_F(EngineCoreTest, BatchOf16MixedLengthsMatchesAloneGreedyAndSeeded) {
  for (bool seeded : {false, true}) {
    auto requests = MixedBatch(16, seeded);
    auto alone = RunAlone(requests);
    EngineOptions options;
    options.block_size = 4;
    options.num_blocks = 1024;
    auto core = MakeEngine(options);
    ExpectSameTokens(Run(*core, requests), alone);
  }
}

TEST_F(EngineCoreTest, ChunkedPrefillMatchesAlone) {
  auto requests = MixedBatch(6, /*seeded=*/true);
  auto alone = RunAlone(requests);
  EngineOptions options;
  options.block_size = 4;
  options.num_blocks = 1024;
  options.max_num_batched_tokens = 7;  // every prompt longer than 7 is chunked
  auto core = MakeEngine(options);
  ExpectSameTokens(Run(*core, requests), alone);
}

TEST_F(EngineCoreTest, PrefixCacheHitSkipsComputeAndKeepsOutput) {
  std::mt19937 rng(5);
  auto prompt = RandomPrompt(rng, 37);
  auto first = MakeRequest("first", prompt, 10);
  auto alone = RunAlone({first});
  EngineOptions options;
  options.block_size = 4;
  options.num_blocks = 256;
  auto core = MakeEngine(options);
  Run(*core, {first});
  // The next agent turn resends the history plus more.
  auto second = MakeRequest("first", prompt, 10);
  auto results = Run(*core, {second});
  EXPECT_EQ(results["first"].tokens, alone["first"].tokens);
  EXPECT_EQ(results["first"].cached_prompt_tokens, 36);  // 9 full blocks; the last token is always recomputed
  EXPECT_GT(core->counters().prefix_hit_tokens, 0);
}

TEST_F(EngineCoreTest, PreemptionByRecomputeLosesNothing) {
  for (bool seeded : {false, true}) {
    auto requests = MixedBatch(10, seeded);
    auto alone = RunAlone(requests);
    EngineOptions options;
    options.block_size = 4;
    options.num_blocks = 24;  // 96 token slots for 10 requests of up to ~60 tokens each
    options.enable_prefix_caching = false;
    auto core = MakeEngine(options);
    ExpectSameTokens(Run(*core, requests), alone);
    EXPECT_GT(core->counters().preemptions, 0);
    EXPECT_EQ(core->block_manager().num_free_blocks(), 24);
  }
}

TEST_F(EngineCoreTest, StopTokenMinTokensAndMaxTokens) {
  std::mt19937 rng(8);
  auto base = MakeRequest("base", RandomPrompt(rng, 9), 16);
  auto reference = RunAlone({base})["base"].tokens;
  ASSERT_EQ(reference.size(), 16u);
  // Stop on the 4th generated token: output ends with it.
  auto stopped = base;
  stopped.stop.stop_token_ids = {reference[3]};
  auto first_hit = std::find(reference.begin(), reference.end(), reference[3]) - reference.begin();
  auto r = RunAlone({stopped})["base"];
  EXPECT_EQ(r.reason, FinishReason::kStop);
  EXPECT_EQ(r.tokens, std::vector<int32_t>(reference.begin(), reference.begin() + first_hit + 1));
  // min_tokens bans the stop id until then, so the output is at least that long.
  auto delayed = stopped;
  delayed.stop.min_tokens = 8;
  auto d = RunAlone({delayed})["base"];
  EXPECT_GE(d.tokens.size(), 8u);
  for (size_t i = 0; i + 1 < std::min<size_t>(d.tokens.size(), 8); ++i) EXPECT_NE(d.tokens[i], reference[3]);
  auto shortened = base;
  shortened.stop.max_tokens = 5;
  auto s = RunAlone({shortened})["base"];
  EXPECT_EQ(s.reason, FinishReason::kLength);
  EXPECT_EQ(s.tokens, std::vector<int32_t>(reference.begin(), reference.begin() + 5));
}

TEST_F(EngineCoreTest, AbortFreesBlocksAndTellsTheSink) {
  EngineOptions options;
  options.block_size = 4;
  options.num_blocks = 64;
  auto core = MakeEngine(options);
  std::mt19937 rng(2);
  auto request = MakeRequest("victim", RandomPrompt(rng, 20), 100);
  FinishReason reason = FinishReason::kNone;
  request.sink = [&](const RequestOutput& out) {
    if (out.finished()) reason = out.finish_reason;
  };
  core->Add(std::move(request));
  ASSERT_TRUE(core->Step().ok());
  ASSERT_TRUE(core->Step().ok());
  EXPECT_LT(core->block_manager().num_free_blocks(), 64);
  EXPECT_TRUE(core->Abort("victim"));
  EXPECT_EQ(reason, FinishReason::kAbort);
  EXPECT_EQ(core->block_manager().num_free_blocks(), 64);
  EXPECT_FALSE(core->HasWork());
  EXPECT_FALSE(core->Abort("victim"));
}

TEST_F(EngineCoreTest, MaxModelLenIsCappedToTheCache) {
  EngineOptions options;
  options.block_size = 4;
  options.num_blocks = 64;  // 256 slots: a sequence must fit the cache alone
  EXPECT_EQ(MakeEngine(options)->max_model_len(), 256);
}

TEST_F(EngineCoreTest, DuplicateLiveIdIsRejectedThroughTheSink) {
  EngineOptions options;
  options.block_size = 4;
  options.num_blocks = 64;
  auto core = MakeEngine(options);
  auto a = MakeRequest("same", {1, 2, 3}, 4);
  auto b = MakeRequest("same", {4, 5, 6}, 4);
  absl::Status rejected;
  b.sink = [&](const RequestOutput& out) { rejected = out.status; };
  core->Add(std::move(a));
  core->Add(std::move(b));
  EXPECT_EQ(rejected.code(), absl::StatusCode::kAlreadyExists);
}

}  // namespace
}  // namespace floe
