// What the refit needs to know of a DLTensor it reads or copies: its size, and that it is compact
// host memory (the sparse refit compares bytes on the CPU).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/error.hpp"
#include "mlpt/mlpt.h"

namespace mlpt::refit {

inline int64_t element_count(const DLTensor& t) {
  int64_t n = 1;
  for (int i = 0; i < t.ndim; ++i) n *= t.shape[i];
  return n;
}
inline size_t element_size(const DLTensor& t) { return (t.dtype.bits * t.dtype.lanes + 7u) / 8u; }
inline size_t byte_size(const DLTensor& t) { return static_cast<size_t>(element_count(t)) * element_size(t); }
inline const std::byte* bytes_of(const DLTensor& t) { return static_cast<const std::byte*>(t.data) + t.byte_offset; }

// The width the sparse refit compares a tensor's elements at: the element's own when it is 1, 2, 4
// or 8 bytes, else byte by byte (still bit exact, only less compact).
inline int compare_width(DLDataType d) {
  const size_t w = (d.bits * d.lanes + 7u) / 8u;
  return w == 1 || w == 2 || w == 4 || w == 8 ? static_cast<int>(w) : 1;
}
inline int compare_width(const DLTensor& t) { return compare_width(t.dtype); }

// Throws MLPT_INVALID_ARGUMENT naming `what` unless `t` is compact row-major in host memory.
inline void require_host_compact(const DLTensor& t, const std::string& what) {
  if (t.device.device_type != kDLCPU && t.device.device_type != kDLCUDAHost)
    throw Error(MLPT_INVALID_ARGUMENT, what + " is not in host memory (device type " + std::to_string(t.device.device_type) +
                                           "): the sparse refit compares on the CPU; set [run] refit = \"dense\"");
  int64_t expected = 1;
  for (int i = t.ndim - 1; t.strides && i >= 0; --i) {
    if (t.shape[i] != 1 && t.strides[i] != expected) throw Error(MLPT_INVALID_ARGUMENT, what + " is not compact row-major");
    expected *= t.shape[i];
  }
  if (!t.data && byte_size(t) > 0) throw Error(MLPT_INVALID_ARGUMENT, what + " has no data");
}

}  // namespace mlpt::refit
