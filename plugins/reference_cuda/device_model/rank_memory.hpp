// What one rank of the device components (the trainer and engine behind qwen35_cuda and
// qwen35_bf16) allocates for its shard of a model under a tp × ep × pp layout, computed with the
// functions they allocate with (shard_config, shard_layout with its pipeline stage's tensors,
// allocate_weights' dtypes, the
// distributed optimizer's ranges): a layout the code refuses throws here with the code's own
// message, and the figures are the sizes of the buffers the components ask for. Activations,
// workspaces and KV caches depend on the batch and are not counted. `mlpt model plan` prints it
// next to its model of a Megatron-style placement.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "model/config.hpp"
#include "model/layout.hpp"

namespace mlpt::ref::dev {

struct RankMemory {
  ModelShard shard;         // the rank of the layout that holds the most bytes
  int64_t parameters = 0;   // the elements of its shard
  double weights = 0;       // working copies: bf16, fp32 where the model keeps a tensor so
  double master = 0;        // the trainer's fp32 master weights of this replica's range
  double gradients = 0;     // the trainer's fp32 gradients
  double moments = 0;       // AdamW m and v of this data-parallel replica's range (distributed optimizer)
  double change_masks = 0;  // a bit per element of the working weights, when the trainer keeps them (below)
  double trainer() const { return weights + master + gradients + moments + change_masks; }
};

// The device trainer marks which working weights its steps changed (a bit per element, for the
// sparse refit) only where it exports them whole: the masters split over replicas, no model
// parallelism (trainer/device_trainer.hpp). Allocated only then, so the other layouts pay nothing.
bool keeps_change_masks(const ModelShard& shard, const std::vector<int>& optimizer_replicas);
// The bytes of those masks: each tensor's ceil(numel / 64) uint64 words, one buffer (8 bytes at least).
size_t change_mask_bytes(const ModelLayout& layout);

// The busiest rank of a layout of tp × ep × pp ranks (expert tensor parallelism etp, 1 or tp; pp
// pipeline stages, each holding its layers' tensors as pipeline_stages.hpp cuts them) whose trainer
// has `data_parallel` replicas; the embedding and LM head split over the TP ranks by token ids
// (vocab_parallel.hpp), or whole on every rank with vocab_parallel false. The masters and moments
// are split over the replicas of optimizer_replicas. Throws MLPT_INVALID_ARGUMENT as shard_config
// does.
RankMemory rank_memory(const ModelConfig& full, int tp, int ep, int etp, int data_parallel, int pp = 1,
                       bool vocab_parallel = true, bool moe_parallel_folding = false);
// The replicas the distributed optimizer (trainer/optimizer_shards.hpp) splits each tensor of
// `layout` (shard `s`'s) over: `data_parallel`, and under MoE parallel folding
// (trainer/trainer_group.hpp) data_parallel · ep for every tensor but the routed experts'.
std::vector<int> optimizer_replicas(const ModelLayout& layout, const ModelShard& s, int data_parallel,
                                    bool moe_parallel_folding);
// What the largest of `replicas` contiguous ranges of n elements holds (ReplicaSplit's ranges).
int64_t largest_range(int64_t n, int replicas);

// One rank's: `shard` of model `full` with `data_parallel` replicas (times its ep ranks for the
// dense tensors under MoE parallel folding).
RankMemory rank_memory_of(const ModelConfig& full, const ModelShard& shard, int data_parallel,
                          bool moe_parallel_folding = false);

}  // namespace mlpt::ref::dev
