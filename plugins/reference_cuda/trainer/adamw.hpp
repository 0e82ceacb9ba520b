// AdamW on fp32 master weights with fp32 moments (docs/benchmark.md §2): bias-corrected moments,
// decoupled weight decay, constant learning rate; gradients pre-scaled for global-norm clipping.
#pragma once

#include <cstdint>
#include <vector>

#include "model/weights.hpp"
#include "trainer/optimizer_shards.hpp"

namespace mlpt::ref {

struct AdamWSettings {
  double lr = 1e-6, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.0;
  double grad_clip = 0.125;  // max global L2 norm; <= 0 disables clipping
};

// One update at step `step` (1-based) with gradients multiplied by `grad_scale`. With `shards` of
// several replicas, m and v hold this replica's range of each tensor (OptimizerShards::keep_range),
// only that range of `grads` is read (OptimizerShards::reduce_scatter summed it) and only that
// range of the weights is updated (OptimizerShards::gather_updated completes them).
void adamw_update(Weights<float>& weights, const Weights<float>& grads, Weights<float>& m, Weights<float>& v,
                  int64_t step, const AdamWSettings& s, double grad_scale, const std::vector<bool>& trainable,
                  const OptimizerShards& shards = {});

}  // namespace mlpt::ref
