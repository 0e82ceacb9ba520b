// Resharding refit: the trainer's ranks each hold shards of the weights in their parallel layout
// (TP/EP/PP), the engine's ranks need shards in theirs. The plan says, per tensor, which global
// region moves from which trainer rank to which engine rank, so that every element an engine rank
// needs arrives exactly once and no rank ever holds more than its own shards (no one gathers the
// whole model). Where trainer ranks hold replicas of a region, each engine rank takes it from one
// of them, spread over the replicas.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "mlpt/mlpt.h"

namespace mlpt::refit {

// A box of a global tensor: [offset[d], offset[d] + extent[d]) in every dimension d.
struct Box {
  std::vector<int64_t> offset, extent;
  int64_t elements() const;
  bool empty() const { return elements() == 0; }
};

// One rank's shard of one tensor.
struct Shard {
  int32_t rank = 0;
  Box box;
};

// Copy `box` (global coordinates) from source rank `from`'s shard `from_shard` to destination
// rank `to`'s shard `to_shard` (indices into the lists given to plan_reshard).
struct Move {
  int32_t from = 0, to = 0;
  size_t from_shard = 0, to_shard = 0;
  Box box;
};

// Plans one tensor of `global_shape`. Throws MLPT_INVALID_ARGUMENT naming `tensor` when a shard
// lies outside the global shape or has another number of dimensions, and MLPT_FAILED_PRECONDITION naming the
// first element a destination needs that no source holds.
std::vector<Move> plan_reshard(const std::string& tensor, const std::vector<int64_t>& global_shape,
                               const std::vector<Shard>& sources, const std::vector<Shard>& destinations);

// The box a shard descriptor describes: offsets and the tensor's own shape (mlpt.h: Tensors).
Box shard_box(const DLTensor& tensor, const mlpt_tensor_shard* shard);

// True when `shard` (NULL: none) says `tensor` is its whole global tensor.
bool is_whole(const DLTensor& tensor, const mlpt_tensor_shard* shard);

// Copies the elements of `box` from `src` (holding `src_box` of the global tensor) into `dst`
// (holding `dst_box`): compact row-major host tensors of one dtype; box lies in both.
void copy_box(const DLTensor& src, const Box& src_box, DLTensor& dst, const Box& dst_box, const Box& box);

}  // namespace mlpt::refit
