// bfloat16 as the backends store it: the top 16 bits of an IEEE float32, rounded to nearest even
// (the rounding of __float2bfloat16 and of cuBLAS outputs). One layout for every backend, so the
// model's buffers mean the same bytes on the host and the device.
#pragma once

#include <cstdint>
#include <cstring>

namespace mlpt::ref {

struct bf16 {
  uint16_t bits;
};
static_assert(sizeof(bf16) == 2, "bf16 is two bytes");

inline float to_float(bf16 x) {
  const uint32_t u = uint32_t(x.bits) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Round to nearest, ties to even; NaN stays a (quiet) NaN, infinities stay infinite.
inline bf16 to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu)) return bf16{uint16_t((u >> 16) | 0x0040u)};
  u += 0x7fffu + ((u >> 16) & 1u);
  return bf16{uint16_t(u >> 16)};
}

// f rounded to the nearest bf16 value, as a float.
inline float round_bf16(float f) {
  return to_float(to_bf16(f));
}

}  // namespace mlpt::ref
