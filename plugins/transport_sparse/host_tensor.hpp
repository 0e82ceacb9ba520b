// What the sparse refit needs to know of a DLTensor it reads or copies: its bytes, the width its
// elements are compared at, and that it is compact host memory (deltas are found on the CPU).
#pragma once

#include <cstddef>
#include <string>

#include "mlpt/sdk/error.hpp"
#include "mlpt/sdk/types.hpp"

namespace mlpt::sparse_refit {

inline const std::byte* bytes_of(const DLTensor& t) {
  return static_cast<const std::byte*>(t.data) + t.byte_offset;
}

// The element's own width when it is 1, 2, 4 or 8 bytes, else byte by byte (still bit exact, only
// less compact).
inline int compare_width(DLDataType d) {
  const size_t w = sdk::element_bytes(d);
  return w == 1 || w == 2 || w == 4 || w == 8 ? static_cast<int>(w) : 1;
}
inline int compare_width(const DLTensor& t) {
  return compare_width(t.dtype);
}

// Throws MLPT_INVALID_ARGUMENT naming `what` unless `t` is compact row-major in host memory.
inline void require_host_compact(const DLTensor& t, const std::string& what) {
  if (t.device.device_type != kDLCPU && t.device.device_type != kDLCUDAHost)
    throw sdk::Error(MLPT_INVALID_ARGUMENT,
                     what + " is not in host memory (device type " + std::to_string(t.device.device_type) +
                         "): the sparse refit compares on the CPU; set [run] refit = \"dense\"");
  if (!sdk::is_compact(t)) throw sdk::Error(MLPT_INVALID_ARGUMENT, what + " is not compact row-major");
  if (!t.data && sdk::nbytes(t) > 0) throw sdk::Error(MLPT_INVALID_ARGUMENT, what + " has no data");
}

}  // namespace mlpt::sparse_refit
