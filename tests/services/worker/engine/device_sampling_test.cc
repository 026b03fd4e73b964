// The engine's side of sampling on the device (Backend::SamplesOnDevice):
// which rows it sends to the device, at which output positions, and how it
// takes the draws back, checked against the engine sampling every row on
// the host, token for token, with and without drafts (chains and trees).
//
// The device here is a stand-in over the real CPU backend that answers
// SampleLogits with the host Sampler (the reference the CUDA kernel is held
// to on a GPU, cuda_kernels_test), so a wrong position, a row sent to the
// device that needs the request's history, or a draw read from the wrong row
// changes the tokens. It declines some rows (-1 and a download) as the CUDA
// kernel does past its candidate window, and fills the rows it is told to
// leave alone with NaN (an engine that read one would show it). Whether the
// CUDA kernel draws what the host Sampler draws is cuda_kernels_test's
// question (label gpu), not this test's.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <string>

#include "services/worker/sampling/sampler.h"
#include "services/worker/speculation/ngram_proposer.h"
#include "services/worker/speculation/suffix_proposer.h"
#include "tests/services/worker/engine/engine_test_harness.h"

namespace floe {
namespace {

struct RowCounts {
  int64_t sampled = 0, declined = 0, downloaded = 0, none = 0;
};

class HostSamplingBackend final : public Backend {
 public:
  HostSamplingBackend(std::unique_ptr<Backend> inner, int decline_every, RowCounts* counts)
      : inner_(std::move(inner)), decline_every_(decline_every), counts_(counts) {}

  const ModelConfig& config() const override { return inner_->config(); }
  size_t KvBytesPerBlock(int block_size) const override { return inner_->KvBytesPerBlock(block_size); }
  absl::Status AllocateKvCache(int num_blocks, int block_size) override {
    return inner_->AllocateKvCache(num_blocks, block_size);
  }
  absl::Status CopyKvSlots(std::span<const KvSlotCopy> copies) override { return inner_->CopyKvSlots(copies); }
  std::span<const float> LastHiddenStates() const override { return inner_->LastHiddenStates(); }

  absl::Status Forward(std::span<const ForwardSequence> batch, float* logits) override {
    EXPECT_EQ(logits, nullptr) << "a sampling device's logits stay on it";
    rows_ = 0;
    for (const ForwardSequence& f : batch) rows_ += f.num_logits;
    device_logits_.resize(static_cast<size_t>(rows_) * vocab());
    return inner_->Forward(batch, device_logits_.data());
  }

  bool SamplesOnDevice() const override { return true; }

  absl::Status SampleLogits(std::span<const RowSampling> rows, int32_t* tokens, float* logits) override {
    EXPECT_EQ(static_cast<int64_t>(rows.size()), rows_);
    for (size_t i = 0; i < rows.size(); ++i) {
      const float* row = device_logits_.data() + i * vocab();
      std::vector<float> copy(row, row + vocab());
      switch (rows[i].action) {
        case RowSampling::Action::kNone:
          ++counts_->none;
          std::fill(logits + i * vocab(), logits + (i + 1) * vocab(), std::nanf(""));
          continue;
        case RowSampling::Action::kDownload:
          ++counts_->downloaded;
          break;
        case RowSampling::Action::kSample:
          if (decline_every_ > 0 && ++sampled_ % decline_every_ == 0) {
            ++counts_->declined;
            tokens[i] = -1;
            break;
          }
          ++counts_->sampled;
          SamplingOptions options;
          options.temperature = rows[i].temperature;
          options.top_k = rows[i].top_k;
          options.top_p = rows[i].top_p;
          options.min_p = rows[i].min_p;
          options.seed = rows[i].seed;
          SamplingContext context;  // no history: the device sees logits only
          context.output_position = rows[i].position;
          tokens[i] = Sampler::Sample(options, context, copy);
          continue;
      }
      std::copy(row, row + vocab(), logits + i * vocab());
    }
    return absl::OkStatus();
  }

 private:
  size_t vocab() const { return static_cast<size_t>(inner_->config().vocab_size); }

  std::unique_ptr<Backend> inner_;
  int decline_every_;
  RowCounts* counts_;
  int64_t sampled_ = 0;
  int64_t rows_ = 0;
  std::vector<float> device_logits_;
};

class DeviceSamplingTest : public EngineHarness {
 protected:
  // Greedy and seeded requests with every sampler stage, and the rows that
  // must come back to the host: penalties, logprobs, banned stop tokens
  // (min_tokens), forced tokens.
  static std::vector<EngineRequest> Requests() {
    std::vector<EngineRequest> requests = MixedBatch(12, /*seeded=*/false);
    // Prompts that repeat themselves, so n-gram and suffix drafts are accepted.
    for (size_t i = 0; i < requests.size(); ++i) {
      std::vector<int32_t>& p = requests[i].prompt;
      const std::vector<int32_t> head(p.begin(), p.begin() + std::min<size_t>(p.size(), 6));
      for (int rep = 0; rep < 4; ++rep) p.insert(p.end(), head.begin(), head.end());
      requests[i].stop.max_tokens = 24;
    }
    // Low temperatures: a random tiny model's drafts are then accepted
    // often enough to reach rows past the first.
    auto seeded = [&](int i, float temperature) -> SamplingOptions& {
      MakeSeeded(requests[i], 500 + i);
      requests[i].sampling.temperature = temperature;
      requests[i].sampling.top_p = 1.0f;
      return requests[i].sampling;
    };
    seeded(1, 0.3f);
    seeded(2, 0.3f).top_p = 0.9f;
    seeded(3, 0.5f).top_k = 5;
    seeded(4, 0.4f).min_p = 0.2f;
    seeded(5, 0.6f).top_k = 40;
    requests[5].sampling.top_p = 0.8f;
    requests[5].sampling.min_p = 0.05f;
    seeded(6, 0.3f).repetition_penalty = 1.3f;
    seeded(7, 0.3f).presence_penalty = 0.5f;
    requests[8].logprobs = true;
    requests[8].top_logprobs = 3;
    seeded(9, 0.3f);
    requests[9].logprobs = true;
    requests[10].stop.stop_token_ids = {requests[10].prompt[2]};
    requests[10].stop.min_tokens = 5;
    requests[10].stop.ignore_eos = false;
    requests[11].sampling.forced_tokens = {7, 8, 9, 7, 8, 9, 7, 8};
    return requests;
  }

  static std::vector<std::unique_ptr<Proposer>> Proposers(const std::string& mode, int k) {
    std::vector<std::unique_ptr<Proposer>> proposers;
    if (mode == "ngram") proposers.push_back(std::make_unique<NgramProposer>(NgramOptions{1, 4, k}));
    if (mode == "suffix") proposers.push_back(std::make_unique<SuffixProposer>(SuffixProposerOptions{}));
    return proposers;
  }
};

TEST_F(DeviceSamplingTest, SameTokensAsHostSamplingWithAndWithoutDrafts) {
  // Every request twice: the suffix proposer then drafts the first pass's
  // outputs, which the second pass repeats (same seeds), so seeded rows deep
  // in long drafts are reached and must be drawn at their own positions.
  std::vector<EngineRequest> requests = Requests();
  const size_t first_pass = requests.size();
  for (size_t i = 0; i < first_pass; ++i) {
    EngineRequest again = requests[i];
    again.id += "-again";
    requests.push_back(std::move(again));
  }
  auto run_twice = [&](EngineCore& core) {
    auto results = Run(core, std::vector<EngineRequest>(requests.begin(), requests.begin() + first_pass));
    for (auto& [id, result] : Run(core, std::vector<EngineRequest>(requests.begin() + first_pass, requests.end())))
      results[id] = std::move(result);
    return results;
  };
  for (const std::string mode : {"off", "ngram", "suffix"}) {
    SCOPED_TRACE(mode);
    const int k = mode == "off" ? 0 : 8;
    EngineOptions options = SpeculationOptions(k);
    options.speculative_step_overhead_tokens = -1;  // draft whatever the proposer finds
    auto host = MakeEngine(options, Proposers(mode, k));
    const auto want = run_twice(*host);

    RowCounts counts;
    auto device = MakeEngine(options, Proposers(mode, k),
                             std::make_unique<HostSamplingBackend>(MakeCpuBackend(), /*decline_every=*/7, &counts));
    const auto got = run_twice(*device);
    ExpectSameTokens(got, want);
    EXPECT_GT(counts.sampled, 0);
    EXPECT_GT(counts.declined, 0);
    EXPECT_GT(counts.downloaded, 0);
    EXPECT_GT(counts.none, 0);
    int64_t accepted = 0;
    for (const SpeculationCounters& c : device->counters().speculation) accepted += c.accepted_tokens;
    if (mode == "suffix") {
      EXPECT_GT(accepted, 100) << "too few accepted drafts to reach rows past the first";
    }
    std::printf("[device_sampling] %s: %lld rows drawn on the device, %lld declined, %lld downloaded, %lld forced; "
                "%lld draft tokens accepted\n",
                mode.c_str(), static_cast<long long>(counts.sampled), static_cast<long long>(counts.declined),
                static_cast<long long>(counts.downloaded), static_cast<long long>(counts.none),
                static_cast<long long>(accepted));
  }
}

TEST_F(DeviceSamplingTest, RowsThatNeedTheRequestsHistoryComeBackToTheHost) {
  // Each kind of row alone: what the engine asks of the device.
  struct Case {
    const char* name;
    void (*edit)(EngineRequest&);
    bool sampled, downloaded, none;
  };
  const Case cases[] = {
      {"greedy", [](EngineRequest&) {}, true, false, false},
      {"seeded", [](EngineRequest& r) { MakeSeeded(r, 3); }, true, false, false},
      {"penalty", [](EngineRequest& r) { r.sampling.frequency_penalty = 0.5f; }, false, true, false},
      {"logprobs", [](EngineRequest& r) { r.logprobs = true; }, false, true, false},
      {"forced", [](EngineRequest& r) { r.sampling.forced_tokens.assign(100, 5); }, false, false, true},
  };
  std::mt19937 rng(2);
  const EngineRequest base = MakeRequest("r", RandomPrompt(rng, 9), 6);
  for (const Case& c : cases) {
    EngineRequest r = base;
    c.edit(r);
    RowCounts counts;
    auto core = MakeEngine(SpeculationOptions(0), {},
                           std::make_unique<HostSamplingBackend>(MakeCpuBackend(), 0, &counts));
    const auto got = Run(*core, {r});
    EXPECT_EQ(got.at("r").tokens.size(), 6u) << c.name;
    EXPECT_EQ(counts.sampled > 0, c.sampled) << c.name;
    EXPECT_EQ(counts.downloaded > 0, c.downloaded) << c.name;
    EXPECT_EQ(counts.none > 0, c.none) << c.name;
  }
  // Banned tokens: before min_tokens the row comes back, after it the device draws.
  EngineRequest r = base;
  r.stop.min_tokens = 3;
  r.stop.ignore_eos = false;
  RowCounts counts;
  auto core = MakeEngine(SpeculationOptions(0), {}, std::make_unique<HostSamplingBackend>(MakeCpuBackend(), 0, &counts));
  Run(*core, {r});
  EXPECT_EQ(counts.downloaded, 3);
  EXPECT_EQ(counts.sampled, 3);
}

}  // namespace
}  // namespace floe
