#include "device_model/rank_memory.hpp"

#include <algorithm>
#include <vector>

#include "device_model/model.hpp"
#include "mlpt/sdk/changed_elements.hpp"
#include "mlpt/sdk/error.hpp"
#include "model/layout.hpp"
#include "model/parallel/shard_weights.hpp"

namespace mlpt::ref::dev {

std::vector<int> optimizer_replicas(const ModelLayout& layout, const ModelShard& s, int data_parallel,
                                    bool moe_parallel_folding) {
  std::vector<int> replicas(layout.tensors.size(), data_parallel);
  if (!moe_parallel_folding) return replicas;
  const std::vector<bool> routed = routed_expert_tensors(layout);
  for (size_t i = 0; i < replicas.size(); ++i)
    if (!routed[i]) replicas[i] = data_parallel * s.ep;
  return replicas;
}

int64_t largest_range(int64_t n, int replicas) {
  int64_t most = 0;
  for (int r = 0; r < replicas; ++r) most = std::max(most, n * (r + 1) / replicas - n * r / replicas);
  return most;
}

bool keeps_change_masks(const ModelShard& shard, const std::vector<int>& optimizer_replicas) {
  return !shard.sharded() && std::any_of(optimizer_replicas.begin(), optimizer_replicas.end(),
                                         [](int replicas) { return replicas > 1; });
}

size_t change_mask_bytes(const ModelLayout& layout) {
  size_t words = 0;
  for (const auto& t : layout.tensors) words += sdk::changed_mask_words(t.numel());
  return std::max<size_t>(words, 1) * 8;
}

RankMemory rank_memory_of(const ModelConfig& full, const ModelShard& s, int data_parallel,
                          bool moe_parallel_folding) {
  RankMemory m;
  m.shard = shard_config(full, s).shard;
  const ModelLayout layout = shard_layout(full, s);
  const std::vector<int> replicas = optimizer_replicas(layout, s, data_parallel, moe_parallel_folding);
  for (size_t i = 0; i < layout.tensors.size(); ++i) {
    const int64_t n = layout.tensors[i].numel(), held = std::max<int64_t>(n, 1);  // as Buffer asks
    const double kept = static_cast<double>(std::max<int64_t>(largest_range(n, replicas[i]), 1));
    m.parameters += n;
    m.weights += static_cast<double>(held) * (is_fp32_tensor(layout, static_cast<int>(i)) ? 4 : 2);
    m.master += kept * 4;
    m.gradients += static_cast<double>(held) * 4;
    m.moments += 2.0 * kept * 4;
  }
  if (keeps_change_masks(s, replicas)) m.change_masks = static_cast<double>(change_mask_bytes(layout));
  return m;
}

RankMemory rank_memory(const ModelConfig& full, int tp, int ep, int etp, int data_parallel, int pp,
                       bool vocab_parallel, bool moe_parallel_folding) {
  if (data_parallel < 1)
    throw sdk::Error(MLPT_INVALID_ARGUMENT, "data parallel " + std::to_string(data_parallel));
  if (pp < 1) throw sdk::Error(MLPT_INVALID_ARGUMENT, "pipeline_parallel " + std::to_string(pp));
  RankMemory busiest;
  for (int r = 0; r < tp * ep * pp; ++r) {
    ModelShard shard = ModelShard::of_model_rank(tp, ep, pp, r, etp);
    shard.vocab_parallel = vocab_parallel;
    const RankMemory m = rank_memory_of(full, shard, data_parallel, moe_parallel_folding);
    if (r == 0 || m.trainer() > busiest.trainer()) busiest = m;
  }
  return busiest;
}

}  // namespace mlpt::ref::dev
