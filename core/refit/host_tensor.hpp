// What the host's refit needs to know of a DLTensor it passes on: its elements and bytes.
#pragma once

#include <cstddef>
#include <cstdint>

#include "mlpt/mlpt.h"

namespace mlpt::refit {

inline int64_t element_count(const DLTensor& t) {
  int64_t n = 1;
  for (int i = 0; i < t.ndim; ++i) n *= t.shape[i];
  return n;
}
inline size_t element_size(const DLTensor& t) { return (t.dtype.bits * t.dtype.lanes + 7u) / 8u; }
inline size_t byte_size(const DLTensor& t) { return static_cast<size_t>(element_count(t)) * element_size(t); }

}  // namespace mlpt::refit
