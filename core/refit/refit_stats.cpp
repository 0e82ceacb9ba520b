#include "core/refit/refit_stats.hpp"

#include "core/refit/host_tensor.hpp"

namespace mlpt::refit {

RefitStats dense_stats(const mlpt_named_tensor* weights, size_t count) {
  RefitStats stats{"dense"};
  for (size_t i = 0; i < count; ++i) {
    stats.numel += element_count(weights[i].tensor);
    stats.dense_bytes += byte_size(weights[i].tensor);
  }
  stats.bytes = stats.dense_bytes;
  return stats;
}

}  // namespace mlpt::refit
