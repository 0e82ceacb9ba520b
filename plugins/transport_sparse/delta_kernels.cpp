#include "delta_kernels.hpp"

#include <cstring>

#include "mlpt/sdk/error.hpp"

// x86-64 only: elsewhere the scalar path is the only one.
#if defined(__x86_64__) && defined(__GNUC__)
#define MLPT_SPARSE_X86 1
#include <immintrin.h>
#else
#define MLPT_SPARSE_X86 0
#endif

// Each vector path is compiled for its instruction set by a function attribute (the rest of the
// build targets the baseline x86-64) and only called after best_simd_path() saw the CPU run it.
#define MLPT_AVX2 __attribute__((target("avx2,popcnt")))
#define MLPT_AVX512 __attribute__((target("avx512f,avx512bw,avx512vbmi2,popcnt")))

namespace mlpt::sparse_refit {
namespace {

// ---- scalar: also every path's partial last word ----

template <int W>
bool differs(const uint8_t* a, const uint8_t* b, int64_t i) {
  return std::memcmp(a + i * W, b + i * W, W) != 0;
}

template <int W>
uint64_t scalar_word_mask(const uint8_t* a, const uint8_t* b, int64_t first, int64_t count) {
  uint64_t m = 0;
  for (int64_t j = 0; j < count; ++j) m |= static_cast<uint64_t>(differs<W>(a, b, first + j)) << j;
  return m;
}

template <int W>
void scalar_gather_word(uint64_t m, int64_t first, const uint8_t* next, std::byte*& values, uint8_t* update) {
  for (; m != 0; m &= m - 1) {
    const int64_t i = first + __builtin_ctzll(m);
    std::memcpy(values, next + i * W, W);
    if (update) std::memcpy(update + i * W, next + i * W, W);
    values += W;
  }
}

template <int W>
void scalar_scatter_word(uint64_t m, int64_t first, const std::byte*& values, uint8_t* target) {
  for (; m != 0; m &= m - 1) {
    std::memcpy(target + (first + __builtin_ctzll(m)) * W, values, W);
    values += W;
  }
}

#if MLPT_SPARSE_X86
// ---- AVX2: 32-byte compares; gathering and scattering stay scalar (AVX2 has no compress) ----

template <int W>
MLPT_AVX2 uint64_t avx2_word_mask(const uint8_t* a, const uint8_t* b) {
  uint64_t equal = 0;
  if constexpr (W == 2) {
    // Two registers of 16 lanes packed to 32 bytes (in-lane pack, then the lanes put in order).
    for (int r = 0; r < 2; ++r) {
      const uint8_t *pa = a + 64 * r, *pb = b + 64 * r;
      __m256i e0 = _mm256_cmpeq_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(pa)),
                                      _mm256_loadu_si256(reinterpret_cast<const __m256i*>(pb)));
      __m256i e1 = _mm256_cmpeq_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(pa + 32)),
                                      _mm256_loadu_si256(reinterpret_cast<const __m256i*>(pb + 32)));
      __m256i packed = _mm256_permute4x64_epi64(_mm256_packs_epi16(e0, e1), 0xD8);
      equal |= static_cast<uint64_t>(static_cast<uint32_t>(_mm256_movemask_epi8(packed))) << (32 * r);
    }
  } else {
    constexpr int per = 32 / W;  // elements per register
    for (int r = 0; r < 2 * W; ++r) {
      __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a + 32 * r));
      __m256i y = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b + 32 * r));
      uint64_t bits;
      if constexpr (W == 1)
        bits = static_cast<uint32_t>(_mm256_movemask_epi8(_mm256_cmpeq_epi8(x, y)));
      else if constexpr (W == 4)
        bits = static_cast<uint32_t>(_mm256_movemask_ps(_mm256_castsi256_ps(_mm256_cmpeq_epi32(x, y))));
      else
        bits = static_cast<uint32_t>(_mm256_movemask_pd(_mm256_castsi256_pd(_mm256_cmpeq_epi64(x, y))));
      equal |= bits << (per * r);
    }
  }
  return ~equal;
}

// ---- AVX-512: 64-byte compares, compress to gather, expand to scatter ----

template <int W>
MLPT_AVX512 uint64_t avx512_lane_mask(__m512i x, __m512i y) {
  if constexpr (W == 1) return _mm512_cmpneq_epi8_mask(x, y);
  if constexpr (W == 2) return _mm512_cmpneq_epi16_mask(x, y);
  if constexpr (W == 4) return _mm512_cmpneq_epi32_mask(x, y);
  if constexpr (W == 8) return _mm512_cmpneq_epi64_mask(x, y);
}

template <int W>
MLPT_AVX512 uint64_t avx512_word_mask(const uint8_t* a, const uint8_t* b) {
  constexpr int per = 64 / W;
  uint64_t m = 0;
  for (int r = 0; r < W; ++r)
    m |= avx512_lane_mask<W>(_mm512_loadu_si512(a + 64 * r), _mm512_loadu_si512(b + 64 * r)) << (per * r);
  return m;
}

// The lanes of register r of a word's mask.
template <int W>
uint64_t lanes_of(uint64_t m, int r) {
  constexpr int per = 64 / W;
  return per == 64 ? m : (m >> (per * r)) & ((uint64_t{1} << per) - 1);
}

// The first `count` lanes as a mask.
inline uint64_t first_lanes(int count) {
  return count == 64 ? ~uint64_t{0} : (uint64_t{1} << count) - 1;
}

template <int W>
MLPT_AVX512 __m512i avx512_compress(uint64_t m, __m512i x) {
  if constexpr (W == 1) return _mm512_maskz_compress_epi8(m, x);
  if constexpr (W == 2) return _mm512_maskz_compress_epi16(static_cast<__mmask32>(m), x);
  if constexpr (W == 4) return _mm512_maskz_compress_epi32(static_cast<__mmask16>(m), x);
  if constexpr (W == 8) return _mm512_maskz_compress_epi64(static_cast<__mmask8>(m), x);
}

template <int W>
MLPT_AVX512 __m512i avx512_expand(uint64_t m, __m512i x) {
  if constexpr (W == 1) return _mm512_maskz_expand_epi8(m, x);
  if constexpr (W == 2) return _mm512_maskz_expand_epi16(static_cast<__mmask32>(m), x);
  if constexpr (W == 4) return _mm512_maskz_expand_epi32(static_cast<__mmask16>(m), x);
  if constexpr (W == 8) return _mm512_maskz_expand_epi64(static_cast<__mmask8>(m), x);
}

template <int W>
MLPT_AVX512 void avx512_store(void* at, uint64_t m, __m512i x) {
  if constexpr (W == 1) _mm512_mask_storeu_epi8(at, m, x);
  if constexpr (W == 2) _mm512_mask_storeu_epi16(at, static_cast<__mmask32>(m), x);
  if constexpr (W == 4) _mm512_mask_storeu_epi32(at, static_cast<__mmask16>(m), x);
  if constexpr (W == 8) _mm512_mask_storeu_epi64(at, static_cast<__mmask8>(m), x);
}

template <int W>
MLPT_AVX512 __m512i avx512_load(const void* at, uint64_t m) {
  if constexpr (W == 1) return _mm512_maskz_loadu_epi8(m, at);
  if constexpr (W == 2) return _mm512_maskz_loadu_epi16(static_cast<__mmask32>(m), at);
  if constexpr (W == 4) return _mm512_maskz_loadu_epi32(static_cast<__mmask16>(m), at);
  if constexpr (W == 8) return _mm512_maskz_loadu_epi64(static_cast<__mmask8>(m), at);
}

// Compress into a register and store its first lanes (a compressing store to memory is slow on
// some CPUs that have it).
// kSkip: registers without changes are skipped by a branch (cheapest when nearly all are unchanged);
// else every register takes the same masked steps, a no-op for an empty mask, so there is no branch
// to mispredict (at around 1% changed about half the registers have a change, at random).
template <int W, bool kSkip>
MLPT_AVX512 void avx512_gather_word(uint64_t m, const uint8_t* next, std::byte*& values, uint8_t* update) {
  for (int r = 0; r < W; ++r) {
    const uint64_t lanes = lanes_of<W>(m, r);
    if (kSkip && lanes == 0) continue;
    const __m512i x = _mm512_loadu_si512(next + 64 * r);
    const int count = __builtin_popcountll(lanes);
    avx512_store<W>(values, first_lanes(count), avx512_compress<W>(lanes, x));
    if (update) avx512_store<W>(update + 64 * r, lanes, x);
    values += count * W;
  }
}

template <int W>
MLPT_AVX512 void avx512_scatter_word(uint64_t m, const std::byte*& values, uint8_t* target) {
  for (int r = 0; r < W; ++r) {
    const uint64_t lanes = lanes_of<W>(m, r);
    if (lanes == 0) continue;
    const int count = __builtin_popcountll(lanes);
    const __m512i x = avx512_load<W>(values, first_lanes(count));
    avx512_store<W>(target + 64 * r, lanes, avx512_expand<W>(lanes, x));
    values += count * W;
  }
}

// Under one change in 256 elements, most registers have none and skipping them by a branch is
// cheapest; above, the branch would be mispredicted often (measured: at 1% changed on a 100 MB
// tensor the branch-free gather takes 5 ms, the branching one 8).
MLPT_AVX512 inline bool mostly_unchanged(const uint64_t* mask, int64_t words) {
  int64_t changed = 0;
  for (int64_t w = 0; w < words; ++w) changed += __builtin_popcountll(mask[w]);
  return changed * 256 < words * 64;
}

#endif  // MLPT_SPARSE_X86

// ---- the loops over a tensor's words, one instantiation per path and width ----

template <int W, SimdPath P>
struct Kernels {
  static int64_t diff(const uint8_t* a, const uint8_t* b, int64_t numel, uint64_t* mask);
  static void gather(const uint64_t* mask, int64_t numel, const uint8_t* next, std::byte* values,
                     uint8_t* update);
  static void scatter(const uint64_t* mask, int64_t numel, const std::byte* values, uint8_t* target);
};

// The partial last word, the same on every path.
template <int W>
int64_t diff_tail(const uint8_t* a, const uint8_t* b, int64_t numel, uint64_t* mask) {
  const int64_t full = numel / 64;
  if (numel % 64 == 0) return 0;
  mask[full] = scalar_word_mask<W>(a, b, full * 64, numel % 64);
  return __builtin_popcountll(mask[full]);
}

template <int W>
struct Kernels<W, SimdPath::scalar> {
  static int64_t diff(const uint8_t* a, const uint8_t* b, int64_t numel, uint64_t* mask) {
    int64_t count = 0;
    for (int64_t w = 0; w < numel / 64; ++w)
      count += __builtin_popcountll(mask[w] = scalar_word_mask<W>(a, b, w * 64, 64));
    return count + diff_tail<W>(a, b, numel, mask);
  }
  static void gather(const uint64_t* mask, int64_t numel, const uint8_t* next, std::byte* values,
                     uint8_t* update) {
    for (int64_t w = 0; w < (numel + 63) / 64; ++w)
      scalar_gather_word<W>(mask[w], w * 64, next, values, update);
  }
  static void scatter(const uint64_t* mask, int64_t numel, const std::byte* values, uint8_t* target) {
    for (int64_t w = 0; w < (numel + 63) / 64; ++w) scalar_scatter_word<W>(mask[w], w * 64, values, target);
  }
};

#if MLPT_SPARSE_X86
template <int W>
struct Kernels<W, SimdPath::avx2> {
  MLPT_AVX2 static int64_t diff(const uint8_t* a, const uint8_t* b, int64_t numel, uint64_t* mask) {
    int64_t count = 0;
    for (int64_t w = 0; w < numel / 64; ++w)
      count += __builtin_popcountll(mask[w] = avx2_word_mask<W>(a + w * 64 * W, b + w * 64 * W));
    return count + diff_tail<W>(a, b, numel, mask);
  }
  static void gather(const uint64_t* mask, int64_t numel, const uint8_t* next, std::byte* values,
                     uint8_t* update) {
    Kernels<W, SimdPath::scalar>::gather(mask, numel, next, values, update);
  }
  static void scatter(const uint64_t* mask, int64_t numel, const std::byte* values, uint8_t* target) {
    Kernels<W, SimdPath::scalar>::scatter(mask, numel, values, target);
  }
};

template <int W>
struct Kernels<W, SimdPath::avx512> {
  MLPT_AVX512 static int64_t diff(const uint8_t* a, const uint8_t* b, int64_t numel, uint64_t* mask) {
    int64_t count = 0;
    for (int64_t w = 0; w < numel / 64; ++w)
      count += __builtin_popcountll(mask[w] = avx512_word_mask<W>(a + w * 64 * W, b + w * 64 * W));
    return count + diff_tail<W>(a, b, numel, mask);
  }
  MLPT_AVX512 static void gather(const uint64_t* mask, int64_t numel, const uint8_t* next, std::byte* values,
                                 uint8_t* update) {
    const int64_t full = numel / 64;
    if (mostly_unchanged(mask, full)) {
      for (int64_t w = 0; w < full; ++w)
        if (mask[w] != 0)
          avx512_gather_word<W, true>(mask[w], next + w * 64 * W, values,
                                      update ? update + w * 64 * W : nullptr);
    } else {
      for (int64_t w = 0; w < full; ++w)
        avx512_gather_word<W, false>(mask[w], next + w * 64 * W, values,
                                     update ? update + w * 64 * W : nullptr);
    }
    if (numel % 64 != 0) scalar_gather_word<W>(mask[full], full * 64, next, values, update);
  }
  MLPT_AVX512 static void scatter(const uint64_t* mask, int64_t numel, const std::byte* values,
                                  uint8_t* target) {
    const int64_t full = numel / 64;
    // Always by a branch: a masked store with an empty mask measured slower here than the skip (the
    // target is not in cache).
    for (int64_t w = 0; w < full; ++w)
      if (mask[w] != 0) avx512_scatter_word<W>(mask[w], values, target + w * 64 * W);
    if (numel % 64 != 0) scalar_scatter_word<W>(mask[full], full * 64, values, target);
  }
};
#endif  // MLPT_SPARSE_X86

// Calls f(Kernels<W, P>{}) for the run-time width and path.
template <class F>
decltype(auto) dispatch(SimdPath path, int width, F&& f) {
  if (!simd_path_supported(path))
    throw sdk::Error(MLPT_INVALID_ARGUMENT,
                     std::string("sparse refit: this CPU cannot run the ") + simd_path_name(path) + " path");
  auto by_path = [&](auto w) -> decltype(auto) {
    constexpr int W = decltype(w)::value;
#if MLPT_SPARSE_X86
    switch (path) {
      case SimdPath::avx512:
        return f(Kernels<W, SimdPath::avx512>{});
      case SimdPath::avx2:
        return f(Kernels<W, SimdPath::avx2>{});
      case SimdPath::scalar:
        break;
    }
#endif
    return f(Kernels<W, SimdPath::scalar>{});
  };
  switch (width) {
    case 1:
      return by_path(std::integral_constant<int, 1>{});
    case 2:
      return by_path(std::integral_constant<int, 2>{});
    case 4:
      return by_path(std::integral_constant<int, 4>{});
    case 8:
      return by_path(std::integral_constant<int, 8>{});
  }
  throw sdk::Error(MLPT_INVALID_ARGUMENT,
                   "sparse refit: elements of " + std::to_string(width) + " bytes (1, 2, 4 or 8 supported)");
}

}  // namespace

bool simd_path_supported(SimdPath path) {
#if !MLPT_SPARSE_X86
  return path == SimdPath::scalar;
#endif
  switch (path) {
    case SimdPath::scalar:
      return true;
    case SimdPath::avx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("popcnt");
    case SimdPath::avx512:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vbmi2") && __builtin_cpu_supports("popcnt");
  }
  return false;
}

SimdPath best_simd_path() {
  static const SimdPath best = simd_path_supported(SimdPath::avx512) ? SimdPath::avx512
                               : simd_path_supported(SimdPath::avx2) ? SimdPath::avx2
                                                                     : SimdPath::scalar;
  return best;
}

const char* simd_path_name(SimdPath path) {
  switch (path) {
    case SimdPath::scalar:
      return "scalar";
    case SimdPath::avx2:
      return "avx2";
    case SimdPath::avx512:
      return "avx512";
  }
  return "?";
}

int64_t diff_mask(SimdPath path, const void* a, const void* b, int64_t numel, int width, uint64_t* mask) {
  return dispatch(path, width, [&](auto k) {
    return decltype(k)::diff(static_cast<const uint8_t*>(a), static_cast<const uint8_t*>(b), numel, mask);
  });
}

void gather_changed(SimdPath path, const uint64_t* mask, int64_t numel, int width, const void* next,
                    std::byte* values, void* update) {
  dispatch(path, width, [&](auto k) {
    decltype(k)::gather(mask, numel, static_cast<const uint8_t*>(next), values,
                        static_cast<uint8_t*>(update));
  });
}

void scatter_changed(SimdPath path, const uint64_t* mask, int64_t numel, int width, const std::byte* values,
                     void* target) {
  dispatch(path, width,
           [&](auto k) { decltype(k)::scatter(mask, numel, values, static_cast<uint8_t*>(target)); });
}

}  // namespace mlpt::sparse_refit
