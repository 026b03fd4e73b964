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

// Inverse standard normal CDF (Acklam's rational approximation, relative
// error below 1.2e-9), for building the sampling table.
double InverseNormalCdf(double p) {
  static constexpr double a[] = {-3.969683028665376e+01, 2.209460984245205e+02,
                                 -2.759285104469687e+02, 1.383577518672690e+02,
                                 -3.066479806614716e+01, 2.506628277459239e+00};
  static constexpr double b[] = {-5.447609879822406e+01, 1.615858368580409e+02,
                                 -1.556989798598866e+02, 6.680131188771972e+01,
                                 -1.328068155288572e+01};
  static constexpr double c[] = {-7.784894002430293e-03, -3.223964580411365e-01,
                                 -2.400758277161838e+00, -2.549732539343734e+00,
                                 4.374664141464968e+00, 2.938163982698783e+00};
  static constexpr double d[] = {7.784695709041462e-03, 3.224671290700398e-01,
                                 2.445134137142996e+00, 3.754408661907416e+00};
  constexpr double kLow = 0.02425;
  if (p < kLow || p > 1 - kLow) {
    double q = std::sqrt(-2 * std::log(p < kLow ? p : 1 - p));
    double x = (((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) /
               ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1);
    return p < kLow ? x : -x;
  }
  double q = p - 0.5, r = q * q;
  return (((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5]) * q /
         (((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1);
}

// Sampling by inverse CDF: a uniform 32-bit value picks one of kBins
// equal-probability bins by its top bits and interpolates inside it by the rest.
// A table lookup instead of log/sin per value keeps a 1.2 B-parameter fill at a
// few ns per value; tails reach about +-4.5 sigma, ample for dummy weights.
constexpr int kBinBits = 16;
constexpr size_t kBins = size_t{1} << kBinBits;

struct NormalTable {
  float edge[kBins + 1];  // quantile at the bin edges, tails clamped
  NormalTable() {
    for (size_t i = 0; i <= kBins; ++i) {
      // Clamp the infinite outer edges to the quantile half a bin further in.
      double p = std::clamp(static_cast<double>(i) / kBins, 0.5 / kBins, 1 - 0.5 / kBins);
      edge[i] = static_cast<float>(InverseNormalCdf(p));
    }
  }
};

const NormalTable& Table() {
  static const NormalTable* table = new NormalTable();  // immutable once built
  return *table;
}

inline float Normal(const NormalTable& table, uint32_t bits) {
  uint32_t bin = bits >> (32 - kBinBits);
  float t = static_cast<float>(bits & ((1u << (32 - kBinBits)) - 1)) *
            (1.0f / (1u << (32 - kBinBits)));
  float lo = table.edge[bin], hi = table.edge[bin + 1];
  return lo + t * (hi - lo);
}

// Elements 2p and 2p+1 of a tensor come from the two halves of hash(key, p).
inline void NormalPair(const NormalTable& table, uint64_t key, uint64_t pair, float* z0,
                       float* z1) {
  uint64_t bits = SplitMix64(key + pair * 0xd1b54a32d192ed03ull);
  *z0 = Normal(table, static_cast<uint32_t>(bits >> 32));
  *z1 = Normal(table, static_cast<uint32_t>(bits));
}

template <typename Store>
void FillNormalWith(uint64_t key, float stddev, size_t numel, Store store) {
  const NormalTable& table = Table();
  ParallelFor((numel + 1) / 2, [&](size_t begin, size_t end) {
    for (size_t pair = begin; pair < end; ++pair) {
      float z0, z1;
      NormalPair(table, key, pair, &z0, &z1);
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
    default: break;  // generated weights are dense (quantize.h quantizes them)
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
