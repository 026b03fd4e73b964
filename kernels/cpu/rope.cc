#include "kernels/cpu/rope.h"

#include <cmath>

namespace floe::cpu {

std::vector<float> RopeInvFreq(const RopeParams& params) {
  const int half = params.head_dim / 2;
  std::vector<float> inv(half);
  for (int i = 0; i < half; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(params.head_dim);
    const float power = static_cast<float>(std::pow(static_cast<double>(params.theta), exponent));
    inv[i] = 1.0f / power;
  }
  if (params.scaling_type == "linear") {
    for (float& f : inv) f /= params.factor;
  } else if (params.scaling_type == "llama3") {
    const float old_len = static_cast<float>(params.original_max_position_embeddings);
    const float low_wavelen = old_len / params.low_freq_factor;
    const float high_wavelen = old_len / params.high_freq_factor;
    const float two_pi = static_cast<float>(2.0 * M_PI);
    for (float& f : inv) {
      const float wavelen = two_pi / f;
      const float scaled = wavelen > low_wavelen ? f / params.factor : f;
      const float smooth = (old_len / wavelen - params.low_freq_factor) /
                           (params.high_freq_factor - params.low_freq_factor);
      const float smoothed = (1.0f - smooth) * scaled / params.factor + smooth * scaled;
      const bool medium = !(wavelen < high_wavelen) && !(wavelen > low_wavelen);
      f = medium ? smoothed : scaled;
    }
  }
  return inv;
}

void RopeCosSin(const std::vector<float>& inv_freq, int64_t pos, float* cos, float* sin) {
  const float p = static_cast<float>(pos);
  for (size_t i = 0; i < inv_freq.size(); ++i) {
    const double angle = static_cast<double>(inv_freq[i] * p);
    cos[i] = static_cast<float>(std::cos(angle));
    sin[i] = static_cast<float>(std::sin(angle));
  }
}

void ApplyRope(float* x, int num_heads, int head_dim, const float* cos, const float* sin) {
  const int half = head_dim / 2;
  for (int h = 0; h < num_heads; ++h) {
    float* v = x + static_cast<int64_t>(h) * head_dim;
    for (int i = 0; i < half; ++i) {
      const float a = v[i], b = v[i + half];
      v[i] = a * cos[i] - b * sin[i];
      v[i + half] = b * cos[i] + a * sin[i];
    }
  }
}

}  // namespace floe::cpu
