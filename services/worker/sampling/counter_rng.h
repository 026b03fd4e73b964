// Counter-based random numbers: the value depends only on (seed, position,
// stream), never on how many numbers were drawn before. A seeded request thus
// samples the same tokens alone, batched, after preemption, or when a
// speculative verifier asks "what would the target have sampled here?".
#pragma once

#include <cstdint>

namespace floe {

// Uniform in [0, 1) with 24 bits of resolution.
inline float CounterUniform(uint64_t seed, uint64_t position, uint64_t stream = 0) {
  // SplitMix64 finaliser over a Weyl-sequenced key: passes BigCrush as a
  // counter-mode generator, and is two multiplies per draw.
  uint64_t z = seed + 0x9e3779b97f4a7c15ULL * (position + 1) + 0xd1b54a32d192ed03ULL * stream;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  z ^= z >> 31;
  return static_cast<float>(z >> 40) * (1.0f / 16777216.0f);
}

}  // namespace floe
