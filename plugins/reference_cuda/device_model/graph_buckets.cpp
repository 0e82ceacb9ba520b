#include "device_model/graph_buckets.hpp"

#include <string>

#include "mlpt/sdk/error.hpp"

namespace mlpt::ref::dev {

namespace {

int64_t power_of_two_at_least(int64_t n) {
  int64_t p = 1;
  while (p < n) p *= 2;
  return p;
}

}  // namespace

std::vector<int64_t> decode_buckets(int64_t max_batch) {
  if (max_batch < 1 || max_batch > 4096)
    throw sdk::Error(MLPT_INVALID_ARGUMENT, "decode graphs: the largest batch must be in [1, 4096], got " +
                                                std::to_string(max_batch));
  std::vector<int64_t> out;
  for (int64_t b = 1; b < max_batch; b *= 2) out.push_back(b);
  out.push_back(power_of_two_at_least(max_batch));
  return out;
}

int64_t choose_bucket(const std::vector<int64_t>& buckets, int64_t sequences) {
  for (int64_t b : buckets)
    if (b >= sequences && sequences >= 1) return b;
  return 0;
}

int64_t table_width(int64_t blocks) {
  return power_of_two_at_least(blocks < 1 ? 1 : blocks);
}

}  // namespace mlpt::ref::dev
