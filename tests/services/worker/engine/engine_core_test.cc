// The engine on the real CPU backend and a tiny random Llama checkpoint:
// batching, chunked prefill, prefix caching and preemption must never change
// what a request generates (greedy or seeded), and limits must hold.
#include "services/worker/engine/engine_core.h"

#include <filesystem>
#include <map>
#include <random>

#include "gtest/gtest.h"
#include "services/worker/backend/cpu_backend.h"
#include "services/worker/model/checkpoint.h"
#include "services/worker/model/checkpoint_writer.h"

namespace floe {
namespace {

namespace fs = std::filesystem;

struct Result {
  std::vector<int32_t> tokens;
  FinishReason reason = FinishReason::kNone;
  int32_t cached_prompt_tokens = 0;
  absl::Status status;
};

class EngineCoreTest : public testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new fs::path(fs::temp_directory_path() / ("floe_engine_test_" + std::to_string(getpid())));
    CheckpointSpec spec;
    spec.preset = "tiny";
    spec.dtype = DType::kF32;
    spec.seed = 3;
    ASSERT_TRUE(WriteRandomCheckpoint(spec, dir_->string()).ok());
    auto checkpoint = Checkpoint::Load(dir_->string(), {});
    ASSERT_TRUE(checkpoint.ok()) << checkpoint.status();
    checkpoint_ = checkpoint->release();
  }
  static void TearDownTestSuite() {
    delete checkpoint_;
    fs::remove_all(*dir_);
    delete dir_;
  }

  std::unique_ptr<EngineCore> MakeEngine(EngineOptions options) {
    options.eos_token_ids = {128001, 128009};
    if (options.max_model_len == 0) options.max_model_len = 2048;
    auto backend = CpuBackend::Create(checkpoint_->config(), checkpoint_->weights(), {2});
    EXPECT_TRUE(backend.ok()) << backend.status();
    auto core = EngineCore::Create(std::move(backend).value(), options);
    EXPECT_TRUE(core.ok()) << core.status();
    return std::move(core).value();
  }

  static EngineRequest MakeRequest(const std::string& id, std::vector<int32_t> prompt, int max_tokens) {
    EngineRequest r;
    r.id = id;
    r.prompt = std::move(prompt);
    r.stop.max_tokens = max_tokens;
    r.stop.ignore_eos = true;
    return r;
  }

  // Runs every request to completion on `core`; results by id.
  static std::map<std::string, Result> Run(EngineCore& core, std::vector<EngineRequest> requests) {
    std::map<std::string, Result> results;
    for (EngineRequest& r : requests) {
      Result* slot = &results[r.id];
      r.sink = [slot](const RequestOutput& out) {
        slot->tokens.insert(slot->tokens.end(), out.new_tokens.begin(), out.new_tokens.end());
        if (out.finished()) {
          slot->reason = out.finish_reason;
          slot->status = out.status;
        }
        slot->cached_prompt_tokens = out.cached_prompt_tokens;
      };
      EXPECT_TRUE(core.Validate(r).ok()) << core.Validate(r);
      core.Add(std::move(r));
    }
    for (int steps = 0; core.HasWork(); ++steps) {
      EXPECT_TRUE(core.Step().ok());
      if (steps > 100000) {
        ADD_FAILURE() << "engine did not finish";
        break;
      }
    }
    EXPECT_TRUE(core.block_manager().CheckIntegrity().ok());
    return results;
  }

  static std::vector<int32_t> RandomPrompt(std::mt19937& rng, int length) {
    std::vector<int32_t> prompt(length);
    for (int32_t& t : prompt) t = static_cast<int32_t>(rng() % 128000);
    return prompt;
  }

  // Reference: each request alone on a fresh engine with a large budget.
  std::map<std::string, Result> RunAlone(const std::vector<EngineRequest>& requests) {
    std::map<std::string, Result> results;
    for (const EngineRequest& r : requests) {
      EngineOptions options;
      options.block_size = 4;
      options.num_blocks = 1024;
      options.enable_prefix_caching = false;
      auto core = MakeEngine(options);
      auto one = Run(*core, {r});
      results[r.id] = one[r.id];
    }
    return results;
  }

  std::vector<EngineRequest> MixedBatch(int count, bool seeded) {
    std::mt19937 rng(11);
    std::vector<EngineRequest> requests;
    for (int i = 0; i < count; ++i) {
      auto r = MakeRequest("r" + std::to_string(i), RandomPrompt(rng, 3 + static_cast<int>(rng() % 40)), 12 + i % 7);
      if (seeded) {
        r.sampling.temperature = 0.9f;
        r.sampling.top_p = 0.95f;
        r.sampling.seed = 1000 + i;
        r.seeded = true;
      }
      requests.push_back(std::move(r));
    }
    return requests;
  }

  static void ExpectSameTokens(const std::map<std::string, Result>& got, const std::map<std::string, Result>& want) {
    ASSERT_EQ(got.size(), want.size());
    for (const auto& [id, result] : want) {
      EXPECT_EQ(got.at(id).tokens, result.tokens) << "request " << id;
      EXPECT_EQ(got.at(id).reason, result.reason) << "request " << id;
    }
  }

  static fs::path* dir_;
  static Checkpoint* checkpoint_;
};

fs::path* EngineCoreTest::dir_ = nullptr;
Checkpoint* EngineCoreTest::checkpoint_ = nullptr;

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
  ASSERT_TRUE(core->Validate(request).ok());
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

TEST_F(EngineCoreTest, ValidationNamesFieldAndLimit) {
  EngineOptions options;
  options.block_size = 4;
  options.num_blocks = 64;  // 256 slots: max_model_len is capped to them
  options.max_tokens_limit = 100;
  auto core = MakeEngine(options);
  auto expect_error = [&](EngineRequest r, absl::StatusCode code, const std::string& needle) {
    absl::Status s = core->Validate(r);
    EXPECT_EQ(s.code(), code) << s;
    EXPECT_NE(s.message().find(needle), absl::string_view::npos) << s;
  };
  expect_error(MakeRequest("a", {}, 5), absl::StatusCode::kInvalidArgument, "empty");
  expect_error(MakeRequest("a", {1, 200000}, 5), absl::StatusCode::kInvalidArgument, "token_ids[1]");
  expect_error(MakeRequest("a", std::vector<int32_t>(300, 1), 5), absl::StatusCode::kInvalidArgument, "max_model_len");
  expect_error(MakeRequest("a", {1, 2}, 101), absl::StatusCode::kOutOfRange, "max_tokens");
  expect_error(MakeRequest("a", {1, 2}, -1), absl::StatusCode::kInvalidArgument, "max_tokens");
  auto hot = MakeRequest("a", {1, 2}, 5);
  hot.sampling.temperature = -0.5f;
  expect_error(hot, absl::StatusCode::kInvalidArgument, "temperature");
  auto nucleus = MakeRequest("a", {1, 2}, 5);
  nucleus.sampling.top_p = 1.5f;
  expect_error(nucleus, absl::StatusCode::kInvalidArgument, "top_p");
  EXPECT_EQ(core->max_model_len(), 256);
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
