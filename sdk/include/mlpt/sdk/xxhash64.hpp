// XXH64 (Yann Collet's xxHash, 64-bit variant), written here from the published algorithm: the
// checksum the weight transports put on every bucket and the sparse refit on every tensor it
// rebuilds; shared by the core and the plugins. Fast (4 independent lanes), not cryptographic: it
// catches corruption and divergence, not tampering.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace mlpt::sdk {

namespace xxhash64_detail {

constexpr uint64_t P1 = 0x9E3779B185EBCA87ULL, P2 = 0xC2B2AE3D27D4EB4FULL, P3 = 0x165667B19E3779F9ULL,
                   P4 = 0x85EBCA77C2B2AE63ULL, P5 = 0x27D4EB2F165667C5ULL;

inline uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
inline uint64_t read64(const unsigned char* p) { uint64_t v; std::memcpy(&v, p, 8); return v; }  // little endian hosts
inline uint32_t read32(const unsigned char* p) { uint32_t v; std::memcpy(&v, p, 4); return v; }
inline uint64_t round(uint64_t acc, uint64_t input) { return rotl(acc + input * P2, 31) * P1; }
inline uint64_t merge(uint64_t acc, uint64_t v) { return (acc ^ round(0, v)) * P1 + P4; }

// The last (fewer than 32) bytes [p, end) folded into h, then the final mix.
inline uint64_t finish(uint64_t h, const unsigned char* p, const unsigned char* end) {
  for (; p + 8 <= end; p += 8) h = rotl(h ^ round(0, read64(p)), 27) * P1 + P4;
  if (p + 4 <= end) {
    h = rotl(h ^ (static_cast<uint64_t>(read32(p)) * P1), 23) * P2 + P3;
    p += 4;
  }
  for (; p < end; ++p) h = rotl(h ^ (*p * P5), 11) * P1;
  h ^= h >> 33;
  h *= P2;
  h ^= h >> 29;
  h *= P3;
  h ^= h >> 32;
  return h;
}

}  // namespace xxhash64_detail

inline uint64_t xxhash64(const void* data, size_t size, uint64_t seed = 0) {
  using namespace xxhash64_detail;
  const auto* p = static_cast<const unsigned char*>(data);
  const unsigned char* end = p + size;
  uint64_t h;
  if (size >= 32) {
    uint64_t v1 = seed + P1 + P2, v2 = seed + P2, v3 = seed, v4 = seed - P1;
    const unsigned char* limit = end - 32;
    do {
      v1 = round(v1, read64(p));
      v2 = round(v2, read64(p + 8));
      v3 = round(v3, read64(p + 16));
      v4 = round(v4, read64(p + 24));
      p += 32;
    } while (p <= limit);
    h = rotl(v1, 1) + rotl(v2, 7) + rotl(v3, 12) + rotl(v4, 18);
    h = merge(h, v1);
    h = merge(h, v2);
    h = merge(h, v3);
    h = merge(h, v4);
  } else {
    h = seed + P5;
  }
  return finish(h + static_cast<uint64_t>(size), p, end);
}

}  // namespace mlpt::sdk
