// The cost model against the model it costs: a ModelOps that only counts
// (FLOPs and weight elements of every Matmul, elements handed to every
// collective) runs the real LlamaForward on one rank of each grid and mode,
// and CountStep must match it exactly. Then the predictions' shape: decode
// is memory-bound and TP's, prefill compute-bound and SP's, the threshold
// moves the right way with the link, and `floe plan`'s shift is never slower
// than its better fixed mode.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "services/worker/model/checkpoint_writer.h"
#include "services/worker/model/llama_forward.h"
#include "services/worker/parallel/cost_model.h"
#include "services/worker/parallel/serving_plan.h"

namespace floe {
namespace {

// Counts what the model asks of one rank (`layout`) in a step.
class CountingOps final : public ModelOps {
 public:
  explicit CountingOps(const RankLayout& layout) : layout_(layout) {}
  StepWork work;

  WeightId PrepareMatrix(std::span<const TensorView> parts) override {
    int64_t n = 0;
    for (const TensorView& p : parts) n += p.rows();
    shapes_.push_back({n, parts[0].cols()});
    return static_cast<WeightId>(shapes_.size() - 1);
  }
  WeightId PrepareVector(std::span<const TensorView>) override { return 0; }
  void PrepareEmbedding(const TensorView&) override {}
  WeightId SliceMatrix(WeightId, int64_t r0, int64_t r1, int64_t c0, int64_t c1) override {
    shapes_.push_back({r1 - r0, c1 - c0});
    return static_cast<WeightId>(shapes_.size() - 1);
  }
  void BeginStep(const StepRows& rows) override {
    all_ = static_cast<int64_t>(rows.tokens.size());
    logit_rows_ = static_cast<int64_t>(rows.logit_rows.size());
    sp_ = rows.mode == ParallelMode::kSequence && layout_.sequence > 1;
    const int s = layout_.sp_rank(), S = layout_.sequence;
    rows_ = sp_ ? all_ * (s + 1) / S - all_ * s / S : all_;
  }
  void Embed(Activation) override {}
  void RmsNorm(Activation, WeightId, Activation) override {}
  void Matmul(Activation, WeightId m, Activation) override {
    if (rows_ == 0) return;
    work.linear_flops += 2.0 * rows_ * shapes_[m].first * shapes_[m].second;
    work.weight_elements += static_cast<double>(shapes_[m].first) * shapes_[m].second;
  }
  void PrepareQk(Activation, WeightId, WeightId, WeightId) override {}
  void SequenceToHeads(Activation, Activation) override {
    if (!sp_) return;
    const double block = (layout_.heads.num_heads() + 2 * layout_.heads.num_kv_heads()) * head_dim_;
    Add(work.all_to_all, (layout_.sequence - 1) * rows_ * block, layout_.sequence);
  }
  void HeadsToSequence(Activation, Activation) override {
    if (!sp_) return;
    Add(work.all_to_all, (all_ - rows_) * layout_.heads.num_heads() * head_dim_, layout_.sequence);
  }
  void WriteKv(int, Activation) override {}
  void ProjectKv(int, Activation in, WeightId m) override { Matmul(in, m, in); }
  void NarrowStep(const StepRows& rows, std::span<const int64_t>, Activation) override { BeginStep(rows); }
  void Attention(int, Activation, Activation) override {}
  void AddRmsNorm(Activation, Activation, WeightId, Activation) override {}
  void SiluMul(Activation, int) override {}
  void Add(Activation, Activation) override {}
  void GatherRmsNorm(Activation, WeightId, Activation) override {
    // The last rank of the SP group holds the last row (the logits row here).
    if (sp_) Add(work.all_to_all, (layout_.sequence - 1) * logit_rows_ * hidden_, layout_.sequence);
  }
  void Logits(Activation, WeightId m, float*) override {
    work.linear_flops += 2.0 * logit_rows_ * shapes_[m].first * shapes_[m].second;
    work.weight_elements += static_cast<double>(shapes_[m].first) * shapes_[m].second;
    // Rank 0 receives every other rank's vocabulary slice.
    const int world = layout_.world();
    if (world > 1) {
      const int64_t rank0 = vocab_ / world;
      work.gather = {1, static_cast<double>(logit_rows_) * (vocab_ - rank0), world};
    }
  }
  void AllReduce(Activation) override {
    if (rows_ == 0) return;
    Add(work.all_reduce, static_cast<double>(rows_) * hidden_, sp_ ? layout_.tensor : layout_.world());
  }
  int64_t head_dim_ = 0, hidden_ = 0, vocab_ = 0;

 private:
  static void Add(StepWork::Collective& c, double elements, int ranks) {
    ++c.calls;
    c.elements += elements;
    c.ranks = ranks;
  }
  RankLayout layout_;
  std::vector<std::pair<int64_t, int64_t>> shapes_;
  int64_t all_ = 0, rows_ = 0, logit_rows_ = 0;
  bool sp_ = false;
};

// A small Llama (GQA 8/2 heads), f32 zeros: only shapes matter.
struct Model {
  ModelConfig config;
  ModelWeights weights;
  std::vector<std::vector<float>> storage;
  Model() {
    config = *PresetConfig("tiny");
    config.hidden_size = 128;
    config.num_heads = 8;
    config.num_kv_heads = 2;
    config.head_dim = 16;
    config.intermediate_size = 256;
    config.vocab_size = 320;  // divisible by every grid here (CountStep takes V / W per rank)
    config.num_layers = 3;
    auto t = [&](std::vector<int64_t> shape) {
      int64_t n = 1;
      for (int64_t d : shape) n *= d;
      storage.emplace_back(n, 0.0f);
      return TensorView{DType::kF32, shape, storage.back().data()};
    };
    const int64_t h = config.hidden_size, q = 8 * 16, kv = 2 * 16, i = config.intermediate_size;
    weights.embed_tokens = t({config.vocab_size, h});
    weights.final_norm = t({h});
    weights.lm_head = t({config.vocab_size, h});
    for (int l = 0; l < config.num_layers; ++l) {
      LayerWeights w;
      w.input_norm = t({h});
      w.post_attention_norm = t({h});
      w.q_proj = t({q, h});
      w.k_proj = t({kv, h});
      w.v_proj = t({kv, h});
      w.o_proj = t({h, q});
      w.gate_proj = t({i, h});
      w.up_proj = t({i, h});
      w.down_proj = t({h, i});
      weights.layers.push_back(w);
    }
  }
};

TEST(CostModelTest, CountsWhatTheModelRuns) {
  Model model;
  const Grid grids[] = {{1, 1}, {2, 1}, {8, 1}, {1, 2}, {1, 4}, {2, 2}, {2, 4}, {1, 8}};
  for (const Grid& grid : grids) {
    for (ParallelMode mode : {ParallelMode::kTensor, ParallelMode::kSequence}) {
      for (int64_t tokens : {1, 3, 8, 37, 200}) {
        SCOPED_TRACE(::testing::Message() << "grid " << grid.tensor << "x" << grid.sequence << " "
                                          << ParallelModeName(mode) << " tokens " << tokens);
        // The busiest rank: the last of the first SP group.
        auto layout = ShiftRankLayout(model.config, grid.sequence - 1, grid.tensor, grid.sequence);
        ASSERT_TRUE(layout.ok()) << layout.status();
        CountingOps ops(*layout);
        ops.head_dim_ = model.config.head_dim;
        ops.hidden_ = model.config.hidden_size;
        ops.vocab_ = model.config.vocab_size;
        auto forward = LlamaForward::Create(model.config, model.weights, ops, &*layout);
        ASSERT_TRUE(forward.ok()) << forward.status();
        std::vector<int32_t> ids(tokens, 1), table(64, 0);
        const ForwardSequence seq{ids, 0, table, 1};
        std::vector<float> logits(model.config.vocab_size);
        (*forward)->Run({&seq, 1}, logits.data(), mode);
        const StepWork want = CountStep(model.config, grid, mode, {.tokens = tokens, .logit_rows = 1});
        EXPECT_DOUBLE_EQ(ops.work.linear_flops, want.linear_flops);
        EXPECT_DOUBLE_EQ(ops.work.weight_elements, want.weight_elements);
        EXPECT_EQ(ops.work.all_reduce.calls, want.all_reduce.calls);
        EXPECT_DOUBLE_EQ(ops.work.all_reduce.elements, want.all_reduce.elements);
        if (want.all_reduce.calls > 0) {
          EXPECT_EQ(ops.work.all_reduce.ranks, want.all_reduce.ranks);
        }
        EXPECT_EQ(ops.work.all_to_all.calls, want.all_to_all.calls);
        EXPECT_DOUBLE_EQ(ops.work.all_to_all.elements, want.all_to_all.elements);
        EXPECT_EQ(ops.work.gather.calls, want.gather.calls);
        EXPECT_DOUBLE_EQ(ops.work.gather.elements, want.gather.elements);
      }
    }
  }
}

TEST(CostModelTest, DecodeIsMemoryBoundAndPrefillComputeBound) {
  const ModelConfig m = *PresetConfig("llama-3.1-8b");
  const Hardware gpu = H100Sxm();
  const Grid grid{1, 8};
  const StepTime decode = PredictStep(m, gpu, grid, ParallelMode::kTensor, {.tokens = 1, .kv_tokens = 1000});
  const StepWork w = CountStep(m, grid, ParallelMode::kTensor, {.tokens = 1});
  EXPECT_NEAR(decode.linear, w.weight_elements * gpu.weight_bytes / gpu.memory_bandwidth, 1e-9);
  const StepTime prefill = PredictStep(m, gpu, grid, ParallelMode::kSequence, {.tokens = 8192});
  const StepWork pw = CountStep(m, grid, ParallelMode::kSequence, {.tokens = 8192});
  // The layers compute-bound; the lm_head (one logits row, its vocab slice) streams its weights.
  const double lm_elements = static_cast<double>(m.hidden_size) * m.vocab_size / grid.world();
  EXPECT_NEAR(prefill.linear,
              (pw.linear_flops - 2 * lm_elements) / gpu.flops + lm_elements * gpu.weight_bytes / gpu.memory_bandwidth,
              1e-9);
  // TP wins the decode step, SP the prefill.
  EXPECT_LT(decode.total(), PredictStep(m, gpu, grid, ParallelMode::kSequence, {.tokens = 1, .kv_tokens = 1000}).total());
  EXPECT_LT(prefill.total(), PredictStep(m, gpu, grid, ParallelMode::kTensor, {.tokens = 8192}).total());
}

// The draft budget's default curve on a GPU: the forward alone (no step
// overhead) at 1, 2, 4, ... and the cap, each in the mode the policy picks;
// flat while the weights stream (a 1B model on an H100: past 256 tokens), then
// linear in the tokens run.
TEST(CostModelTest, RooflineStepCostCurveIsFlatThenLinear) {
  const ModelConfig m = *PresetConfig("llama-3.2-1b");
  const Hardware gpu = H100Sxm();
  auto tp = [](int64_t) { return ParallelMode::kTensor; };
  const auto curve = RooflineStepCostCurve(m, gpu, {1, 1}, tp, 512);
  std::vector<int> sizes;
  for (const auto& [n, ms] : curve) sizes.push_back(n);
  EXPECT_EQ(sizes, (std::vector<int>{1, 2, 4, 8, 16, 32, 64, 128, 256, 512}));
  auto forward_ms = [&](int64_t n) {
    const StepTime t = PredictStep(m, gpu, {1, 1}, ParallelMode::kTensor,
                                   {.tokens = n, .kv_tokens = n, .logit_rows = n, .attended = n * (n + 1) / 2});
    return (t.total() - t.overhead) * 1e3;
  };
  for (const auto& [n, ms] : curve) {
    EXPECT_DOUBLE_EQ(ms, forward_ms(n)) << n;
    std::printf("[roofline] llama-3.2-1b on an H100, %d tokens: %.3f ms\n", n, ms);
  }
  // One token streams every weight once: bytes over bandwidth.
  const StepWork one = CountStep(m, {1, 1}, ParallelMode::kTensor, {.tokens = 1});
  EXPECT_NEAR(curve[0].second, one.weight_elements * gpu.weight_bytes / gpu.memory_bandwidth * 1e3, 0.01);
  EXPECT_LT(curve[5].second, 1.05 * curve[0].second) << "32 tokens still stream the weights";
  EXPECT_GT(curve[9].second, 1.7 * curve[8].second) << "512 tokens are compute-bound";
  for (size_t i = 1; i < curve.size(); ++i) EXPECT_GE(curve[i].second, curve[i - 1].second);
  // A cap that is not a power of two ends the curve; the mode follows the policy.
  const auto capped = RooflineStepCostCurve(m, gpu, {1, 1}, tp, 100);
  EXPECT_EQ(capped.back().first, 100);
  EXPECT_EQ(capped.size(), 8u);
  EXPECT_TRUE(RooflineStepCostCurve(m, gpu, {1, 1}, tp, 0).empty());
  const ModelConfig big = *PresetConfig("llama-3.1-70b");
  const Grid grid{2, 4};
  auto shift_at_64 = [](int64_t n) { return n >= 64 ? ParallelMode::kSequence : ParallelMode::kTensor; };
  const auto shifted = RooflineStepCostCurve(big, gpu, grid, shift_at_64, 128);
  const StepTime sp = PredictStep(big, gpu, grid, ParallelMode::kSequence,
                                  {.tokens = 64, .kv_tokens = 64, .logit_rows = 64, .attended = 64 * 65 / 2});
  EXPECT_DOUBLE_EQ(shifted[6].second, (sp.total() - sp.overhead) * 1e3);
}

TEST(CostModelTest, ThresholdIsTheCrossoverAndMovesWithTheLink) {
  const ModelConfig m = *PresetConfig("llama-3.1-70b");
  Hardware gpu = H200Sxm();
  const Grid grid{2, 4};
  const int64_t threshold = PredictShiftThreshold(m, gpu, grid);
  ASSERT_GT(threshold, 1);
  ASSERT_LT(threshold, kNeverShift);
  auto total = [&](const Hardware& hw, ParallelMode mode, int64_t n) {
    return PredictStep(m, hw, grid, mode, {.tokens = n, .kv_tokens = n, .attended = n * (n + 1) / 2}).total();
  };
  EXPECT_LE(total(gpu, ParallelMode::kSequence, threshold), total(gpu, ParallelMode::kTensor, threshold));
  EXPECT_GT(total(gpu, ParallelMode::kSequence, threshold - 1), total(gpu, ParallelMode::kTensor, threshold - 1));
  // A slower link makes TP's all-reduces dearer: SP pays from fewer tokens.
  Hardware pcie = gpu;
  pcie.link_bandwidth = kPcieBandwidth;
  EXPECT_LT(PredictShiftThreshold(m, pcie, grid), threshold);
  EXPECT_EQ(PredictShiftThreshold(m, gpu, {8, 1}), kNeverShift);  // S = 1: nothing to shift to
}

TEST(ServingPlanTest, ShiftIsNeverSlowerThanItsBetterFixedMode) {
  for (const char* preset : {"llama-3.1-8b", "llama-3.1-70b", "qwen3-32b"}) {
    const ModelConfig m = *PresetConfig(preset);
    for (const Hardware& gpu : {H100Sxm(), H200Sxm()}) {
      const ServingPlan plan = PlanServing(m, gpu, 8, {});
      ASSERT_EQ(plan.modes.size(), 4u);
      const PlanMode &tp = plan.modes[1], &sp = plan.modes[2], &shift = plan.modes[3];
      EXPECT_EQ(shift.name, "shift");
      for (size_t i = 0; i < shift.points.size(); ++i) {
        SCOPED_TRACE(::testing::Message() << preset << " " << gpu.name << " c=" << shift.points[i].concurrency);
        // Each step in the mode the threshold picks: within 5% of the better
        // of TP and SP (the threshold is one crossover, found on prefill-like
        // steps; mixed steps and decode KV move the real one a little).
        EXPECT_LE(shift.points[i].ttft_s, 1.05 * std::min(tp.points[i].ttft_s, sp.points[i].ttft_s));
        EXPECT_LE(shift.points[i].tpot_s, 1.05 * std::min(tp.points[i].tpot_s, sp.points[i].tpot_s));
      }
    }
  }
}

}  // namespace
}  // namespace floe
