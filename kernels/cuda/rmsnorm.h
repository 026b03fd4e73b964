// CUDA RMSNorm, callable from plain C++ (no CUDA headers needed by callers).
// y[r, :] = x[r, :] / sqrt(mean(x[r, :]^2) + eps) * weight, f32, one block per row.
#pragma once

namespace floe::cuda {

// All pointers are device memory; `stream` is a cudaStream_t (nullptr: the
// default stream). The launch is asynchronous. Returns 0 (cudaSuccess) or the
// cudaError_t of an invalid argument or a failed launch; see ErrorString.
int RmsNormF32(const float* x, const float* weight, float eps, int rows, int cols, float* y,
               void* stream);

// Human-readable text of a code RmsNormF32 returned.
const char* ErrorString(int code);

}  // namespace floe::cuda
