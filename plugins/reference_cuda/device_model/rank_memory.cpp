#include "device_model/rank_memory.hpp"

#include <algorithm>

#include "device_model/model.hpp"
#include "model/layout.hpp"
#include "model/parallel/shard_weights.hpp"
#include "mlpt/sdk/error.hpp"

namespace mlpt::ref::dev {

namespace {

// What the largest of `replicas` contiguous ranges of n elements holds (trainer/optimizer_shards.hpp).
int64_t largest_range(int64_t n, int replicas) {
  int64_t most = 0;
  for (int r = 0; r < replicas; ++r) most = std::max(most, n * (r + 1) / replicas - n * r / replicas);
  return most;
}

RankMemory of_rank(const ModelConfig& full, const ModelShard& s, int data_parallel) {
  RankMemory m;
  m.shard = shard_config(full, s).shard;
  const ModelLayout layout = shard_layout(full, s);
  for (size_t i = 0; i < layout.tensors.size(); ++i) {
    const int64_t n = layout.tensors[i].numel(), held = std::max<int64_t>(n, 1);  // as Buffer asks
    m.parameters += n;
    m.weights += static_cast<double>(held) * (is_fp32_tensor(layout, static_cast<int>(i)) ? 4 : 2);
    m.master += static_cast<double>(held) * 4;
    m.gradients += static_cast<double>(held) * 4;
    m.moments += 2.0 * static_cast<double>(std::max<int64_t>(largest_range(n, data_parallel), 1)) * 4;
  }
  return m;
}

}  // namespace

RankMemory rank_memory(const ModelConfig& full, int tp, int ep, int etp, int data_parallel, int pp,
                       bool vocab_parallel) {
  if (data_parallel < 1) throw sdk::Error(MLPT_INVALID_ARGUMENT, "data parallel " + std::to_string(data_parallel));
  if (pp < 1) throw sdk::Error(MLPT_INVALID_ARGUMENT, "pipeline_parallel " + std::to_string(pp));
  RankMemory busiest;
  for (int r = 0; r < tp * ep * pp; ++r) {
    ModelShard shard = ModelShard::of_model_rank(tp, ep, pp, r, etp);
    shard.vocab_parallel = vocab_parallel;
    const RankMemory m = of_rank(full, shard, data_parallel);
    if (r == 0 || m.trainer() > busiest.trainer()) busiest = m;
  }
  return busiest;
}

}  // namespace mlpt::ref::dev
