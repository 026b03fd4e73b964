// Shared fixture for engine tests: EngineCore on the real CPU backend and a
// tiny random Llama checkpoint written once per test suite, plus helpers that
// run requests to completion and compare what they generated.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "services/worker/backend/cpu_backend.h"
#include "services/worker/engine/engine_core.h"
#include "services/worker/model/checkpoint.h"
#include "services/worker/model/checkpoint_writer.h"

namespace floe {

struct Result {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
  FinishReason reason = FinishReason::kNone;
  int32_t cached_prompt_tokens = 0;
  int outputs = 0;  // RequestOutputs received
  absl::Status status;
};

class EngineHarness : public testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new std::filesystem::path(std::filesystem::temp_directory_path() /
                                     ("floe_engine_test_" + std::to_string(getpid())));
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
    std::filesystem::remove_all(*dir_);
    delete dir_;
  }

  static std::unique_ptr<Backend> MakeCpuBackend() {
    auto backend = CpuBackend::Create(checkpoint_->config(), checkpoint_->weights(), {2});
    EXPECT_TRUE(backend.ok()) << backend.status();
    return std::move(backend).value();
  }

  // On `backend` (a CPU backend over the suite's checkpoint when null).
  static std::unique_ptr<EngineCore> MakeEngine(EngineOptions options,
                                                std::vector<std::unique_ptr<Proposer>> proposers = {},
                                                std::unique_ptr<Backend> backend = nullptr) {
    options.eos_token_ids = {128001, 128009};
    if (options.max_model_len == 0) options.max_model_len = 2048;
    if (!backend) backend = MakeCpuBackend();
    auto core = EngineCore::Create(std::move(backend), options, std::move(proposers));
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

  // Runs every request to completion on `core`; results by id. Checks the
  // block manager's integrity and that no block stays referenced.
  static std::map<std::string, Result> Run(EngineCore& core, std::vector<EngineRequest> requests) {
    std::map<std::string, Result> results;
    for (EngineRequest& r : requests) {
      Result* slot = &results[r.id];
      r.sink = [slot](const RequestOutput& out) {
        slot->tokens.insert(slot->tokens.end(), out.new_tokens.begin(), out.new_tokens.end());
        for (const TokenLogprobs& lp : out.logprobs) slot->logprobs.push_back(lp.logprob);
        ++slot->outputs;
        if (out.finished()) {
          slot->reason = out.finish_reason;
          slot->status = out.status;
        }
        slot->cached_prompt_tokens = out.cached_prompt_tokens;
      };
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
    EXPECT_EQ(core.block_manager().num_free_blocks(), core.block_manager().num_blocks());
    return results;
  }

  static std::vector<int32_t> RandomPrompt(std::mt19937& rng, int length) {
    std::vector<int32_t> prompt(length);
    for (int32_t& t : prompt) t = static_cast<int32_t>(rng() % 128000);
    return prompt;
  }

  // Reference: each request alone on a fresh engine with a large budget.
  static std::map<std::string, Result> RunAlone(const std::vector<EngineRequest>& requests) {
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

  static std::vector<EngineRequest> MixedBatch(int count, bool seeded) {
    std::mt19937 rng(11);
    std::vector<EngineRequest> requests;
    for (int i = 0; i < count; ++i) {
      auto r = MakeRequest("r" + std::to_string(i), RandomPrompt(rng, 3 + static_cast<int>(rng() % 40)), 12 + i % 7);
      if (seeded) MakeSeeded(r, 1000 + i);
      requests.push_back(std::move(r));
    }
    return requests;
  }

  // Nucleus sampling with a fixed seed: the counter RNG must give the same
  // tokens however the request is scheduled.
  static void MakeSeeded(EngineRequest& r, uint64_t seed) {
    r.sampling.temperature = 0.9f;
    r.sampling.top_p = 0.95f;
    r.sampling.seed = seed;
    r.seeded = true;
  }

  // Engine options for speculation tests: k draft tokens, never turned off by
  // load, and a pinned draft budget: the step cost is the line 1 + N, never a
  // curve measured on this host, so what a test drafts and accepts does not
  // depend on how busy the machine was (MeasuredStepCostCurve* tests measure).
  static EngineOptions SpeculationOptions(int k) {
    EngineOptions options;
    options.block_size = 4;
    options.num_blocks = 512;
    options.num_speculative_tokens = k;
    options.speculative_token_threshold = 1 << 20;
    options.measure_step_cost = false;
    options.speculative_step_cost_curve.clear();
    options.speculative_step_overhead_tokens = 1.0;
    return options;
  }

  // The reference for speculation: same requests, same options, no drafts.
  static std::map<std::string, Result> RunWithoutSpeculation(const std::vector<EngineRequest>& requests,
                                                             EngineOptions options) {
    options.num_speculative_tokens = 0;
    auto core = MakeEngine(options);
    return Run(*core, requests);
  }

  // `base` stopped by each stop rule: a stop token (`stop_token`), the same
  // stop token delayed by min_tokens 6, and max_tokens 5.
  static std::vector<EngineRequest> StopRuleVariants(const EngineRequest& base, int32_t stop_token) {
    auto stopped = base;
    stopped.stop.stop_token_ids = {stop_token};
    auto delayed = stopped;
    delayed.id = "delayed";
    delayed.stop.min_tokens = 6;
    auto shortened = base;
    shortened.id = "short";
    shortened.stop.max_tokens = 5;
    return {stopped, delayed, shortened};
  }

  static void ExpectSameTokens(const std::map<std::string, Result>& got, const std::map<std::string, Result>& want) {
    ASSERT_EQ(got.size(), want.size());
    for (const auto& [id, result] : want) {
      EXPECT_EQ(got.at(id).tokens, result.tokens) << "request " << id;
      EXPECT_EQ(got.at(id).logprobs, result.logprobs) << "request " << id;
      EXPECT_EQ(got.at(id).reason, result.reason) << "request " << id;
    }
  }

  static inline std::filesystem::path* dir_ = nullptr;
  static inline Checkpoint* checkpoint_ = nullptr;
};

}  // namespace floe
