// A uniform double in [0, 1) from (seed, counter): a stateless mixing function (SplitMix64 finaliser
// applied to a Weyl combination of the two), so the draw is reproducible in any order. One
// definition for the host and the device, so CPU and CUDA sampling draw the same numbers.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define MLPT_HOST_DEVICE __host__ __device__
#else
#define MLPT_HOST_DEVICE
#endif

namespace mlpt::ref {

MLPT_HOST_DEVICE inline double counter_uniform(uint64_t seed, uint64_t counter) {
  uint64_t z = seed * 0x9E3779B97F4A7C15ull + (counter + 1) * 0xD1B54A32D192ED03ull;
  for (int round = 0; round < 2; ++round) {
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
  }
  return static_cast<double>(z >> 11) * 0x1.0p-53;
}

}  // namespace mlpt::ref
