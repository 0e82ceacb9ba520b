// Sparse refit (docs/benchmark.md §7): with a learning rate of 1e-6 most BF16 weights do not change in
// a step, so the engine's copy is updated by sending only what changed. A tensor's update is
// encoded in whichever of three forms is smallest for it:
//   dense    every value (element_bytes per element);
//   indices  the positions of the changed elements as LEB128 gaps, then their values;
//   bitmap   one bit per element, then the changed values in order.
// Encoding compares the versions into a change mask with the widest vector instructions the CPU has
// (delta_kernels.hpp) and then touches only the 64-element words that changed.
// Elements are compared as bit patterns of 1, 2, 4 or 8 bytes (BF16, FP32, ...): a NaN payload or
// the sign of zero counts, so applying the update to the receiver's previous copy reproduces the
// sender's new tensor bit for bit.
//
// Encoding (little-endian): "MLSD" | u8 form | u8 element bytes | u8[2] 0 | u64 numel | u64 changed
// | u64 payload bytes | payload. Anything that does not match is refused as MLPT_DATA_LOSS, naming
// the tensor.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "delta_kernels.hpp"

namespace mlpt::sparse_refit {

enum class DeltaForm : uint8_t { dense = 0, indices = 1, bitmap = 2 };
const char* form_name(DeltaForm f);

struct DeltaStats {
  int64_t numel = 0, changed = 0;
  DeltaForm form = DeltaForm::dense;
  size_t bytes = 0;  // of the encoding, header included
};

// Appends to `out` the update that turns `prev` into `next` (numel elements of element_bytes each:
// 1, 2, 4 or 8; anything else is MLPT_INVALID_ARGUMENT).
// With `next_checksum`, also its sdk::xxhash64 of next's bytes, computed in the same pass.
DeltaStats encode_delta(const void* prev, const void* next, int64_t numel, int element_bytes,
                        std::vector<std::byte>& out, SimdPath path = best_simd_path(),
                        uint64_t* next_checksum = nullptr);
// The same, and `base` (the previous values) becomes `next`: only the changed elements are written,
// so the sender's copy follows without a second pass over the tensor.
DeltaStats encode_delta_and_update(void* base, const void* next, int64_t numel, int element_bytes,
                                   std::vector<std::byte>& out, SimdPath path = best_simd_path(),
                                   uint64_t* next_checksum = nullptr);

// The update from a writer's change list (mlpt/sdk/changed_elements.hpp): the elements of `next`
// whose bit is set in `changes` (words (numel + 63) / 64; bits past numel are ignored), each sent
// as it is now: a marked element that did not change is sent all the same. Nothing is compared, so
// only the mask and the marked elements are read; applied to the version the list counts from, it
// gives `next` bit for bit as long as every element left unmarked is unchanged.
DeltaStats encode_marked(const uint64_t* changes, const void* next, int64_t numel, int element_bytes,
                         std::vector<std::byte>& out, SimdPath path = best_simd_path());

// Applies one encoding (exactly `size` bytes) to `values` (numel elements of element_bytes) in
// place. Throws MLPT_DATA_LOSS naming `tensor` when the encoding is malformed or for another size
// or element width; `values` is left untouched then.
// `path`: the instruction set of the inner loops (delta_kernels.hpp); every path gives the same bytes.
void apply_delta(const std::byte* data, size_t size, void* values, int64_t numel, int element_bytes,
                 const std::string& tensor, SimdPath path = best_simd_path());

// The BF16 (2-byte) case.
inline DeltaStats encode_bf16_delta(const uint16_t* prev, const uint16_t* next, int64_t numel,
                                    std::vector<std::byte>& out) {
  return encode_delta(prev, next, numel, 2, out);
}
inline void apply_bf16_delta(const std::byte* data, size_t size, uint16_t* values, int64_t numel,
                             const std::string& tensor) {
  apply_delta(data, size, values, numel, 2, tensor);
}

}  // namespace mlpt::sparse_refit
