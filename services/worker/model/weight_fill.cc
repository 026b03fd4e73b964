#include "services/worker/model/weight_fill.h"

#include <algorithm>
#include <cmath>
#include <thread>
#include <vector>

namespace floe {
namespace {

constexpr size_t kMinChunk = 1 << 16;

inline uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

uint64_t HashName(absl::string_view name) {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a
  for (char ch : name) h = (h ^ static_cast<uint8_t>(ch)) * 0x100000001b3ull;
  return h;
}

// Element 2p and 2p+1 of a tensor: both Box-Muller outputs of counter p.
inline void NormalPair(uint64_t key, uint64_t pair, float* z0, float* z1) {
  uint64_t bits = SplitMix64(key ^ SplitMix64(pair));
  // u1 in (0, 1] keeps log finite; u2 in [0, 1).
  float u1 = (static_cast<float>(bits >> 40) + 1.0f) * (1.0f / 16777216.0f);
  float u2 = static_cast<float>((bits >> 8) & 0xffffffu) * (1.0f / 16777216.0f);
  float r = std::sqrt(-2.0f * std::log(u1));
  float theta = 6.2831853071795864f * u2;
  *z0 = r * std::cos(theta);
  *z1 = r * std::sin(theta);
}

template <typename Store>
void FillNormalWith(uint64_t key, float stddev, size_t numel, Store store) {
  ParallelFor((numel + 1) / 2, [&](size_t begin, size_t end) {
    for (size_t pair = begin; pair < end; ++pair) {
      float z0, z1;
      NormalPair(key, pair, &z0, &z1);
      store(2 * pair, z0 * stddev);
      if (2 * pair + 1 < numel) store(2 * pair + 1, z1 * stddev);
    }
  });
}

void FillConstant(DType dtype, float value, void* out, size_t numel) {
  if (dtype == DType::kF32) {
    std::fill_n(static_cast<float*>(out), numel, value);
  } else {
    uint16_t bits = dtype == DType::kBF16 ? F32ToBf16(value) : F32ToF16(value);
    std::fill_n(static_cast<uint16_t*>(out), numel, bits);
  }
}

}  // namespace

void ParallelFor(size_t n, const std::function<void(size_t begin, size_t end)>& fn) {
  size_t threads = std::max<size_t>(1, std::thread::hardware_concurrency());
  threads = std::min(threads, std::max<size_t>(1, n / kMinChunk));
  if (threads <= 1) {
    if (n > 0) fn(0, n);
    return;
  }
  std::vector<std::thread> workers;
  size_t chunk = (n + threads - 1) / threads;
  for (size_t t = 0; t < threads; ++t) {
    size_t begin = t * chunk;
    size_t end = std::min(n, begin + chunk);
    if (begin >= end) break;
    workers.emplace_back(fn, begin, end);
  }
  for (std::thread& worker : workers) worker.join();
}

void FillNormal(DType dtype, uint64_t seed, absl::string_view name, float stddev, void* out,
                size_t numel) {
  uint64_t key = SplitMix64(seed) ^ HashName(name);
  switch (dtype) {
    case DType::kF32: {
      float* dst = static_cast<float*>(out);
      FillNormalWith(key, stddev, numel, [dst](size_t i, float v) { dst[i] = v; });
      break;
    }
    case DType::kBF16: {
      uint16_t* dst = static_cast<uint16_t*>(out);
      FillNormalWith(key, stddev, numel, [dst](size_t i, float v) { dst[i] = F32ToBf16(v); });
      break;
    }
    case DType::kF16: {
      uint16_t* dst = static_cast<uint16_t*>(out);
      FillNormalWith(key, stddev, numel, [dst](size_t i, float v) { dst[i] = F32ToF16(v); });
      break;
    }
  }
}

void FillGeneratedWeight(const WeightSpec& spec, DType dtype, uint64_t seed, void* out) {
  size_t numel = 1;
  for (int64_t dim : spec.shape) numel *= static_cast<size_t>(dim);
  switch (spec.kind) {
    case WeightKind::kNorm: FillConstant(dtype, 1.0f, out, numel); break;
    case WeightKind::kMatrix: FillNormal(dtype, seed, spec.name, 0.02f, out, numel); break;
    case WeightKind::kBias: FillNormal(dtype, seed, spec.name, 0.01f, out, numel); break;
  }
}

void WidenF16ToF32(const uint16_t* in, float* out, size_t numel) {
  ParallelFor(numel, [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) out[i] = F16ToF32(in[i]);
  });
}

}  // namespace floe
