// The step's global batch in the trainer ABI's packed layout (mlpt_train_batch), built from GRPO
// groups: every sequence of every group is kept (zero-advantage groups too); advantages are the
// leave-one-out ones; the per-token arrays are the trajectories' own, unchanged.
#pragma once

#include <vector>

#include "core/rl/replay_buffer.hpp"
#include "mlpt/trainer.h"

namespace mlpt::rl {

struct StepStatistics {
  int64_t sequences = 0, tokens = 0, trainable_tokens = 0, truncated = 0;
  int64_t zero_advantage_groups = 0;
  double reward_mean = 0;
  uint64_t max_staleness = 0;  // current version - oldest generating version, over the batch
};

class TrainBatch {
 public:
  // `current_version` is the trainer's version before this step (for staleness).
  TrainBatch(const std::vector<Group>& groups, double advantage_epsilon, uint64_t current_version,
             bool with_routing, int64_t num_moe_layers, int64_t experts_per_token);
  TrainBatch(const TrainBatch&) = delete;
  TrainBatch& operator=(const TrainBatch&) = delete;

  // Points into this object: valid while it lives.
  const mlpt_train_batch* abi() const { return &batch_; }
  const StepStatistics& statistics() const { return stats_; }
  const std::vector<float>& advantages() const { return advantages_; }

 private:
  std::vector<int64_t> offsets_;
  std::vector<int32_t> tokens_;
  std::vector<uint8_t> loss_mask_, truncated_;
  std::vector<float> logprobs_, advantages_;
  std::vector<int16_t> routed_;
  StepStatistics stats_;
  mlpt_train_batch batch_{};
};

}  // namespace mlpt::rl
