// The inner loops of the sparse refit's codec, one implementation per instruction set, chosen at run
// time (the trainer's and the engine's machines may differ): at 1% changed a refit is a pass over
// the whole model, so these decide whether it runs at memory speed.
//
// A change mask has one bit per element, bit i % 64 of word i / 64 (on a little-endian host its
// bytes are exactly the bitmap form's bytes, sparse_delta.hpp). Elements are compared as bit
// patterns of `width` = 1, 2, 4 or 8 bytes, so NaN payloads and the sign of zero count.
#pragma once

#include <cstddef>
#include <cstdint>

namespace mlpt::sparse_refit {

enum class SimdPath : uint8_t { scalar = 0, avx2 = 1, avx512 = 2 };

// The widest path this CPU runs (avx512 needs AVX-512 F, BW and VBMI2; avx2 needs AVX2).
SimdPath best_simd_path();
bool simd_path_supported(SimdPath path);
const char* simd_path_name(SimdPath path);

// Sets the bits of the elements where `a` and `b` differ in mask[0 .. (numel + 63) / 64) (written
// whole; bits past numel are 0) and returns how many differ. `a` and `b` need no alignment.
int64_t diff_mask(SimdPath path, const void* a, const void* b, int64_t numel, int width, uint64_t* mask);

// Copies the elements of `next` whose mask bit is set, in order, to `values` (popcount * width
// bytes); with `update` non-null, also writes them into `update` (which then equals `next`).
void gather_changed(SimdPath path, const uint64_t* mask, int64_t numel, int width, const void* next,
                    std::byte* values, void* update);

// The inverse: the masked elements of `target` take `values`, in order.
void scatter_changed(SimdPath path, const uint64_t* mask, int64_t numel, int width, const std::byte* values,
                     void* target);

}  // namespace mlpt::sparse_refit
