// The model over two GPU ranks' collectives, one GPU per rank, a thread
// each: CPU backends whose collectives run on NCCL with host buffers staged
// through device memory (SP over NCCL is bit-identical to one rank, and TP
// over NCCL to TP over Gloo: a two-way sum is a + b on both), and CUDA
// backends on NCCL, TP and SP, against one CPU rank within the CUDA
// backend's stated tolerance (cuda_backend_test). Skipped, with the device
// count, on fewer than 2 GPUs (bench/gpu/check.sh runs it).
#include <cuda_runtime.h>
#include <unistd.h>

#include <filesystem>
#include <functional>
#include <thread>

#include <gtest/gtest.h>

#include "services/worker/backend/cpu_backend.h"
#include "services/worker/backend/cuda_backend.h"
#include "services/worker/backend/rank_group.h"
#include "services/worker/parallel/gloo_communicator.h"
#include "services/worker/parallel/nccl_communicator.h"
#include "tests/services/worker/backend/test_model.h"

namespace floe {
namespace {

using testing_model::Flavor;
using testing_model::Generation;
using testing_model::TestModel;

// Host spans through an NCCL communicator: copied to the device and back
// around each collective.
class HostStaged final : public Communicator {
 public:
  explicit HostStaged(Communicator& nccl) : nccl_(nccl) {}
  ~HostStaged() override {
    cudaFree(in_);
    cudaFree(out_);
  }
  int rank() const override { return nccl_.rank(); }
  int size() const override { return nccl_.size(); }
  absl::Status AllReduceSum(std::span<float> data) override {
    Grow(data.size(), 0);
    cudaMemcpy(in_, data.data(), data.size_bytes(), cudaMemcpyHostToDevice);
    absl::Status s = nccl_.AllReduceSum({in_, data.size()});
    cudaMemcpy(data.data(), in_, data.size_bytes(), cudaMemcpyDeviceToHost);
    return s;
  }
  absl::Status AllGather(std::span<const float> in, std::span<float> out) override {
    Grow(in.size(), out.size());
    cudaMemcpy(in_, in.data(), in.size_bytes(), cudaMemcpyHostToDevice);
    absl::Status s = nccl_.AllGather({in_, in.size()}, {out_, out.size()});
    cudaMemcpy(out.data(), out_, out.size_bytes(), cudaMemcpyDeviceToHost);
    return s;
  }
  absl::Status AllToAll(std::span<const float> in, std::span<const int64_t> send_counts, std::span<float> out,
                        std::span<const int64_t> recv_counts) override {
    Grow(in.size(), out.size());
    cudaMemcpy(in_, in.data(), in.size_bytes(), cudaMemcpyHostToDevice);
    absl::Status s = nccl_.AllToAll({in_, in.size()}, send_counts, {out_, out.size()}, recv_counts);
    cudaMemcpy(out.data(), out_, out.size_bytes(), cudaMemcpyDeviceToHost);
    return s;
  }
  absl::Status Broadcast(std::span<std::byte> data, int root, std::chrono::milliseconds wait) override {
    return nccl_.Broadcast(data, root, wait);  // unused by the backend
  }
  absl::Status Barrier() override { return nccl_.Barrier(); }

 private:
  void Grow(size_t in, size_t out) {
    if (in > in_size_) {
      cudaFree(in_);
      cudaMalloc(&in_, in * sizeof(float));
      in_size_ = in;
    }
    if (out > out_size_) {
      cudaFree(out_);
      cudaMalloc(&out_, out * sizeof(float));
      out_size_ = out;
    }
  }
  Communicator& nccl_;
  float *in_ = nullptr, *out_ = nullptr;
  size_t in_size_ = 0, out_size_ = 0;
};

std::vector<int32_t> Prompt(int n, int vocab) {
  std::vector<int32_t> p(n);
  for (int i = 0; i < n; ++i) p[i] = (17 + i * 53) % vocab;
  return p;
}

// Generates on 2 ranks (T = 2 or S = 2) over NCCL (or Gloo), on CPU
// backends or (with NCCL) CUDA backends.
Generation OnTwoRanks(const TestModel& model, bool nccl, bool sequence_parallel, bool cuda_backend = false) {
  static int n = 0;
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("floe_nccl_model_" + std::to_string(getpid()) + "_" + std::to_string(n++)))
          .string();
  std::filesystem::create_directories(dir);
  Generation out;
  std::vector<std::thread> ranks;
  for (int r = 0; r < 2; ++r) {
    ranks.emplace_back([&, r] {
      auto boot = GlooCommunicator::Connect({.rank = r, .size = 2, .store_dir = dir});
      ASSERT_TRUE(boot.ok()) << boot.status();
      std::unique_ptr<NcclCommunicator> device;
      std::unique_ptr<HostStaged> staged;
      Communicator* comm = boot->get();
      if (nccl) {
        ASSERT_EQ(cudaSetDevice(r), cudaSuccess);
        auto c = NcclCommunicator::Connect({.device = r, .bootstrap = boot->get()});
        ASSERT_TRUE(c.ok()) << c.status();
        device = std::move(c).value();
        staged = std::make_unique<HostStaged>(*device);
        comm = staged.get();
      }
      absl::StatusOr<std::unique_ptr<Backend>> backend;
      if (cuda_backend) {
        auto made = CudaBackend::Create(
            model.config(), model.weights(),
            {.device = r, .communicator = device.get(), .sequence_parallel_size = sequence_parallel ? 2 : 1});
        if (made.ok()) backend = std::unique_ptr<Backend>(std::move(made).value()); else backend = made.status();
      } else {
        auto made = CpuBackend::Create(
            model.config(), model.weights(),
            {.num_threads = 1, .communicator = comm, .sequence_parallel_size = sequence_parallel ? 2 : 1});
        if (made.ok()) backend = std::unique_ptr<Backend>(std::move(made).value()); else backend = made.status();
      }
      ASSERT_TRUE(backend.ok()) << backend.status();
      // Rank 0 drives (its plan broadcasts go over the Gloo bootstrap), rank 1 follows.
      if (r == 1) {
        EXPECT_TRUE(RunFollower(**backend, **boot).ok());
        return;
      }
      LeaderBackend leader(std::move(backend).value(), **boot,
                           [](const absl::Status& s) { ADD_FAILURE() << "rank group failed: " << s; },
                           {sequence_parallel ? ShiftPolicy::Pin::kSequence : ShiftPolicy::Pin::kTensor});
      ASSERT_TRUE(leader.AllocateKvCache(64, 4).ok());
      out = testing_model::Generate(leader, Prompt(21, model.config().vocab_size), 12, 8, 4, 0, 64);
    });
  }
  for (auto& t : ranks) t.join();
  std::filesystem::remove_all(dir);
  return out;
}

TEST(NcclParallelTest, SpIsBitIdenticalToOneRankAndTpToGloo) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess) devices = 0;
  if (devices < 2) GTEST_SKIP() << "skipped: needs 2 CUDA devices, found " << devices;
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    TestModel model(Flavor::kLlama3, dtype, 29);
    auto one = CpuBackend::Create(model.config(), model.weights(), {.num_threads = 1});
    ASSERT_TRUE(one.ok());
    ASSERT_TRUE((*one)->AllocateKvCache(64, 4).ok());
    const Generation want = testing_model::Generate(**one, Prompt(21, model.config().vocab_size), 12, 8, 4, 0, 64);
    const Generation sp = OnTwoRanks(model, /*nccl=*/true, /*sequence_parallel=*/true);
    EXPECT_EQ(sp.prompt_logits, want.prompt_logits);
    EXPECT_EQ(sp.step_logits, want.step_logits);
    const Generation tp_nccl = OnTwoRanks(model, true, false);
    const Generation tp_gloo = OnTwoRanks(model, false, false);
    EXPECT_EQ(tp_nccl.prompt_logits, tp_gloo.prompt_logits);
    EXPECT_EQ(tp_nccl.step_logits, tp_gloo.step_logits);
  }
}

// Max |a - b| over every row, relative to 1 + the row's max |b|.
float RelativeError(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b) {
  float worst = 0;
  for (size_t r = 0; r < b.size() && r < a.size(); ++r) {
    float scale = 1, diff = 0;
    for (size_t i = 0; i < b[r].size(); ++i) {
      scale = std::max(scale, std::abs(b[r][i]));
      diff = std::max(diff, std::abs(a[r][i] - b[r][i]));
    }
    worst = std::max(worst, diff / scale);
  }
  return a.size() == b.size() ? worst : INFINITY;
}

TEST(NcclParallelTest, CudaBackendsOverNcclMatchOneCpuRank) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess) devices = 0;
  if (devices < 2) GTEST_SKIP() << "skipped: needs 2 CUDA devices, found " << devices;
  for (DType dtype : {DType::kF32, DType::kBF16}) {
    const float tol = dtype == DType::kF32 ? 1e-4f : 2e-2f;  // cuda_backend_test's bounds
    TestModel model(Flavor::kQwen2, dtype, 31);
    auto one = CpuBackend::Create(model.config(), model.weights(), {.num_threads = 1});
    ASSERT_TRUE(one.ok());
    ASSERT_TRUE((*one)->AllocateKvCache(64, 4).ok());
    const Generation want = testing_model::Generate(**one, Prompt(21, model.config().vocab_size), 12, 8, 4, 0, 64);
    for (bool sp : {false, true}) {
      const Generation got = OnTwoRanks(model, /*nccl=*/true, sp, /*cuda_backend=*/true);
      EXPECT_LE(RelativeError(got.prompt_logits, want.prompt_logits), tol) << (sp ? "SP" : "TP") << " prompt";
      // Each fed its own tokens: compare while they agree.
      size_t same = 0;
      while (same < want.tokens.size() && same < got.tokens.size() && got.tokens[same] == want.tokens[same]) ++same;
      std::vector<std::vector<float>> g(got.step_logits.begin(), got.step_logits.begin() + same + (same < got.step_logits.size())),
          w(want.step_logits.begin(), want.step_logits.begin() + g.size());
      EXPECT_LE(RelativeError(g, w), tol) << (sp ? "SP" : "TP") << " decode";
    }
  }
}

}  // namespace
}  // namespace floe
