#include "trainer/optimizer_shards.hpp"

#include <algorithm>
#include <string>

#include "mlpt/sdk/error.hpp"

namespace mlpt::ref {

OptimizerShards::OptimizerShards(int replicas, int rank) : replicas_(replicas), rank_(rank) {
  if (replicas < 1 || rank < 0 || rank >= replicas)
    throw sdk::Error(MLPT_INVALID_ARGUMENT, "distributed optimizer: replica " + std::to_string(rank) + " of " +
                                                std::to_string(replicas));
}

std::vector<size_t> OptimizerShards::counts(int64_t numel) const {
  std::vector<size_t> out;
  for (int r = 0; r < replicas_; ++r) out.push_back(static_cast<size_t>(first_of(r + 1, numel) - first_of(r, numel)));
  return out;
}

Weights<float> OptimizerShards::keep_range(const Weights<float>& whole) const {
  Weights<float> out;
  out.config = whole.config;
  out.layout = whole.layout;
  for (const std::vector<float>& t : whole.values) {
    const int64_t n = static_cast<int64_t>(t.size());
    out.values.emplace_back(t.begin() + first(n), t.begin() + first(n) + count(n));
  }
  return out;
}

Weights<float> OptimizerShards::gather_whole(Communicator* group, const Weights<float>& ranges) const {
  Weights<float> out;
  out.config = ranges.config;
  out.layout = ranges.layout;
  for (size_t i = 0; i < ranges.values.size(); ++i) {
    const int64_t n = ranges.layout.tensors[i].numel();
    if (static_cast<int64_t>(ranges.values[i].size()) != count(n))
      throw sdk::Error(MLPT_INTERNAL, "distributed optimizer: " + ranges.layout.tensors[i].name + " holds " +
                                          std::to_string(ranges.values[i].size()) + " values, its range " +
                                          std::to_string(count(n)));
    out.values.emplace_back(static_cast<size_t>(n), 0.0f);
    if (replicas_ == 1) {
      out.values[i] = ranges.values[i];
    } else {
      const std::vector<size_t> c = counts(n);
      group->all_gather_v(ranges.values[i].data(), c[static_cast<size_t>(rank_)], out.values[i].data(), c.data());
    }
  }
  return out;
}

void OptimizerShards::reduce_scatter(Communicator* group, Weights<float>& grads,
                                     const std::vector<bool>& trainable) const {
  if (replicas_ == 1) return;
  std::vector<float> sum;  // the receive buffer may not alias the send buffer
  for (size_t i = 0; i < grads.values.size(); ++i) {
    if (!trainable[i]) continue;
    std::vector<float>& g = grads.values[i];
    const int64_t n = static_cast<int64_t>(g.size());
    sum.resize(static_cast<size_t>(count(n)));
    group->reduce_scatter_v(g.data(), sum.data(), counts(n).data());
    std::copy(sum.begin(), sum.end(), g.begin() + first(n));
  }
}

void OptimizerShards::add_range_squares(const std::vector<float>& values, double& squares) const {
  const int64_t n = static_cast<int64_t>(values.size());
  for (int64_t j = first(n); j < first(n) + count(n); ++j)
    squares += static_cast<double>(values[j]) * values[j];
}

void OptimizerShards::gather_updated(Communicator* group, Weights<float>& weights, const std::vector<bool>& trainable) const {
  if (replicas_ == 1) return;
  std::vector<float> mine;
  for (size_t i = 0; i < weights.values.size(); ++i) {
    if (!trainable[i]) continue;
    std::vector<float>& t = weights.values[i];
    const int64_t n = static_cast<int64_t>(t.size());
    mine.assign(t.begin() + first(n), t.begin() + first(n) + count(n));  // the send buffer may not alias
    const std::vector<size_t> c = counts(n);
    group->all_gather_v(mine.data(), mine.size(), t.data(), c.data());
  }
}

}  // namespace mlpt::ref
