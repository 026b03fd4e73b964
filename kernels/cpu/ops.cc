#include <cmath>
#include <cstring>

#include "kernels/cpu/ops.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/cpu/ops.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "hwy/contrib/math/math-inl.h"

HWY_BEFORE_NAMESPACE();
namespace floe::cpu {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using DF = hn::ScalableTag<float>;

float SumOfSquares(const float* x, int64_t n) {
  const DF df;
  const int64_t lanes = hn::Lanes(df);
  auto acc0 = hn::Zero(df), acc1 = hn::Zero(df);
  int64_t i = 0;
  for (; i + 2 * lanes <= n; i += 2 * lanes) {
    const auto a = hn::LoadU(df, x + i), b = hn::LoadU(df, x + i + lanes);
    acc0 = hn::MulAdd(a, a, acc0);
    acc1 = hn::MulAdd(b, b, acc1);
  }
  float sum = hn::GetLane(hn::SumOfLanes(df, hn::Add(acc0, acc1)));
  for (; i < n; ++i) sum += x[i] * x[i];
  return sum;
}

void RmsNormImpl(const float* x, const float* weight, float eps, int64_t n, float* y) {
  const float inv = 1.0f / std::sqrt(SumOfSquares(x, n) / static_cast<float>(n) + eps);
  const DF df;
  const int64_t lanes = hn::Lanes(df);
  const auto vinv = hn::Set(df, inv);
  int64_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    hn::StoreU(hn::Mul(hn::LoadU(df, weight + i), hn::Mul(hn::LoadU(df, x + i), vinv)), df, y + i);
  }
  for (; i < n; ++i) y[i] = weight[i] * (x[i] * inv);
}

void SiluMulImpl(const float* gate, const float* up, int64_t n, float* out) {
  const DF df;
  const int64_t lanes = hn::Lanes(df);
  const auto one = hn::Set(df, 1.0f);
  int64_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    const auto g = hn::LoadU(df, gate + i);
    const auto sig = hn::Div(one, hn::Add(one, hn::Exp(df, hn::Neg(g))));
    hn::StoreU(hn::Mul(hn::Mul(g, sig), hn::LoadU(df, up + i)), df, out + i);
  }
  for (; i < n; ++i) out[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

void AddInPlaceImpl(float* y, const float* x, int64_t n) {
  const DF df;
  const int64_t lanes = hn::Lanes(df);
  int64_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    hn::StoreU(hn::Add(hn::LoadU(df, y + i), hn::LoadU(df, x + i)), df, y + i);
  }
  for (; i < n; ++i) y[i] += x[i];
}

const char* SimdTargetNameImpl() { return hwy::TargetName(HWY_TARGET); }

}  // namespace HWY_NAMESPACE
}  // namespace floe::cpu
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace floe::cpu {

HWY_EXPORT(SimdTargetNameImpl);
HWY_EXPORT(RmsNormImpl);
HWY_EXPORT(SiluMulImpl);
HWY_EXPORT(AddInPlaceImpl);

const char* SimdTargetName() { return HWY_DYNAMIC_DISPATCH(SimdTargetNameImpl)(); }
void RmsNorm(const float* x, const float* weight, float eps, int64_t n, float* y) {
  HWY_DYNAMIC_DISPATCH(RmsNormImpl)(x, weight, eps, n, y);
}
void SiluMul(const float* gate, const float* up, int64_t n, float* out) {
  HWY_DYNAMIC_DISPATCH(SiluMulImpl)(gate, up, n, out);
}
void AddInPlace(float* y, const float* x, int64_t n) { HWY_DYNAMIC_DISPATCH(AddInPlaceImpl)(y, x, n); }

void EmbeddingLookup(const TensorView& table, std::span<const int32_t> ids, float* out) {
  const int64_t dim = table.cols();
  for (size_t i = 0; i < ids.size(); ++i) {
    float* row = out + i * dim;
    if (table.dtype == DType::kBF16) {
      const uint16_t* src = static_cast<const uint16_t*>(table.data) + ids[i] * dim;
      for (int64_t j = 0; j < dim; ++j) row[j] = Bf16ToF32(src[j]);
    } else if (table.dtype == DType::kF16) {
      const uint16_t* src = static_cast<const uint16_t*>(table.data) + ids[i] * dim;
      for (int64_t j = 0; j < dim; ++j) row[j] = F16ToF32(src[j]);
    } else {
      std::memcpy(row, static_cast<const float*>(table.data) + ids[i] * dim, dim * sizeof(float));
    }
  }
}

}  // namespace floe::cpu
#endif  // HWY_ONCE
