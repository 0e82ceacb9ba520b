// Where each tensor of a shard (shard_weights.hpp) lies in the whole model's tensor, as boxes of
// the global tensor: what a sharded trainer exports (ABI 1.2 mlpt_tensor_shard) so the host's
// reshard planner can reassemble the model in any other layout. A shard tensor whose rows come
// from several places of the global tensor (GDN's q | k | v blocks, each expert's gate | up
// halves) is several boxes, each named like the tensor (mlpt.h: an interleaved layout names its
// parts as separate tensors).
#pragma once

#include <cstdint>
#include <vector>

#include "model/weights.hpp"

namespace mlpt::ref {

// One box: the part of the local tensor at local_offset of size extent is the part of the global
// tensor at global_offset.
struct ShardBox {
  std::vector<int64_t> local_offset, extent, global_offset;
};

struct ShardPlacement {
  std::vector<int64_t> global_shape;
  std::vector<ShardBox> boxes;  // together they cover the local tensor once
};

// For every tensor of `local` (the layout of shard_weights(full, shard)), its placement in the
// tensor of the same name of a model of config `full` (not a shard); no boxes for another pipeline
// stage's tensors.
std::vector<ShardPlacement> shard_placements(const ModelConfig& full, const ModelLayout& local, const ModelShard& shard);

// Copies box `box` (its local_offset and extent) of the row-major tensor `from` of shape `shape`
// into the compact `to`; place_local_box is the reverse (the compact box into its place). Float
// or double.
template <class T>
void copy_local_box(const T* from, const std::vector<int64_t>& shape, const ShardBox& box, T* to);
template <class T>
void place_local_box(const T* from, const std::vector<int64_t>& shape, const ShardBox& box, T* to);

}  // namespace mlpt::ref
