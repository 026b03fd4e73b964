// Rotary position embedding, HF "rotate_half" convention (pairs (i, i+d/2)),
// with the inverse frequencies of HF's rope init functions (default, linear,
// llama3 = `_compute_llama3_parameters`), computed in f32 as PyTorch does.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace floe::cpu {

struct RopeParams {
  int head_dim = 0;
  float theta = 10000.0f;
  std::string scaling_type;  // "", "default", "linear" or "llama3"
  float factor = 1.0f;
  float low_freq_factor = 1.0f;
  float high_freq_factor = 4.0f;
  int original_max_position_embeddings = 8192;
};

// head_dim/2 inverse frequencies.
std::vector<float> RopeInvFreq(const RopeParams& params);

// cos/sin of pos * inv_freq[i] (f32 product, as HF), head_dim/2 each.
void RopeCosSin(const std::vector<float>& inv_freq, int64_t pos, float* cos, float* sin);

// Rotates num_heads contiguous heads of one token in place.
void ApplyRope(float* x, int num_heads, int head_dim, const float* cos, const float* sin);

}  // namespace floe::cpu
