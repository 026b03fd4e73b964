// NcclCommunicator on two GPUs (one rank per device, a thread each, Gloo
// over loopback as the bootstrap): every collective against the same
// oracle as the Gloo test. Skipped, with the device count, on fewer GPUs.
#include "services/worker/parallel/nccl_communicator.h"

#include <cuda_runtime.h>
#include <unistd.h>

#include <filesystem>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "services/worker/parallel/gloo_communicator.h"

namespace floe {
namespace {

float Input(int rank, size_t i) { return static_cast<float>((rank + 1) * 1000 + static_cast<int>(i % 997)) * 0.25f; }

TEST(NcclCommunicatorTest, CollectivesOnTwoDevicesMatchTheOracle) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess) devices = 0;
  if (devices < 2) GTEST_SKIP() << "skipped: needs 2 CUDA devices, found " << devices;
  const std::string dir = (std::filesystem::temp_directory_path() / ("floe_nccl_" + std::to_string(getpid()))).string();
  std::filesystem::create_directories(dir);
  const int size = 2;
  const size_t n = 1 << 16;
  std::vector<std::thread> ranks;
  for (int r = 0; r < size; ++r) {
    ranks.emplace_back([&, r] {
      auto boot = GlooCommunicator::Connect({.rank = r, .size = size, .store_dir = dir});
      ASSERT_TRUE(boot.ok()) << boot.status();
      auto comm = NcclCommunicator::Connect({.device = r, .bootstrap = boot->get()});
      ASSERT_TRUE(comm.ok()) << comm.status();
      std::vector<float> host(n);
      for (size_t i = 0; i < n; ++i) host[i] = Input(r, i);
      float *data = nullptr, *all = nullptr;
      ASSERT_EQ(cudaMalloc(&data, n * sizeof(float)), cudaSuccess);
      ASSERT_EQ(cudaMalloc(&all, size * n * sizeof(float)), cudaSuccess);
      ASSERT_EQ(cudaMemcpy(data, host.data(), n * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
      ASSERT_TRUE((*comm)->AllGather({data, n}, {all, size * n}).ok());
      std::vector<float> gathered(size * n);
      ASSERT_EQ(cudaMemcpy(gathered.data(), all, gathered.size() * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
      for (int q = 0; q < size; ++q)
        for (size_t i = 0; i < n; i += 97) ASSERT_EQ(gathered[q * n + i], Input(q, i));
      ASSERT_TRUE((*comm)->AllReduceSum({data, n}).ok());
      ASSERT_EQ(cudaMemcpy(host.data(), data, n * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
      for (size_t i = 0; i < n; i += 97) ASSERT_EQ(host[i], Input(0, i) + Input(1, i));
      // All-to-all: rank r sends its first (r + 1) * 100 floats to peer 0, the next 50 to peer 1.
      const std::vector<int64_t> send = {(r + 1) * 100, 50}, recv = {r == 0 ? 100 : 50, r == 0 ? 200 : 50};
      float* out = nullptr;
      ASSERT_EQ(cudaMalloc(&out, (recv[0] + recv[1]) * sizeof(float)), cudaSuccess);
      ASSERT_TRUE((*comm)->AllToAll({all + r * n, static_cast<size_t>(send[0] + send[1])}, send,
                                    {out, static_cast<size_t>(recv[0] + recv[1])}, recv).ok());
      ASSERT_TRUE((*comm)->Barrier().ok());
      cudaFree(out);
      cudaFree(all);
      cudaFree(data);
    });
  }
  for (auto& t : ranks) t.join();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace floe
