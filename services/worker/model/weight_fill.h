// Filling weight buffers fast: seeded random weights for --load-format dummy
// and for the checkpoint writer, and f16 -> f32 widening at load.
//
// Random values are a pure function of (seed, tensor name, element index)
// (a counter-based generator: SplitMix64 of the counter, then a tabulated
// inverse normal CDF), so
// the result does not depend on thread count or fill order, and a dummy load
// with seed S equals a checkpoint written with seed S.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>

#include "absl/strings/string_view.h"
#include "common/tensor/dtype.h"
#include "services/worker/model/weight_layout.h"

namespace floe {

// Calls fn(begin, end) on disjoint ranges covering [0, n), on up to
// hardware_concurrency threads; returns when all are done.
void ParallelFor(size_t n, const std::function<void(size_t begin, size_t end)>& fn);

// numel values N(0, 1) * stddev, rounded to `dtype`.
void FillNormal(DType dtype, uint64_t seed, absl::string_view name, float stddev, void* out,
                size_t numel);

// The generated value of a weight: norms 1.0, matrices N(0,1)*0.02, biases
// N(0,1)*0.01. `out` holds numel(spec.shape) elements of `dtype`.
void FillGeneratedWeight(const WeightSpec& spec, DType dtype, uint64_t seed, void* out);

void WidenF16ToF32(const uint16_t* in, float* out, size_t numel);

}  // namespace floe
