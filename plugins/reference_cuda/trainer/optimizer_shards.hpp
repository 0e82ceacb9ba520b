// The distributed optimizer (ZeRO stage 1, as Megatron-Core's distributed optimizer): the Adam
// moments of every tensor are split over the data-parallel replicas of its shard, replica r
// keeping those of one contiguous range of the tensor's elements. After the gradient sum each
// replica updates its range of the weights, and the replicas gather each other's ranges, so every
// replica holds the whole updated shard. The result is bit for bit the update of one replica that
// keeps every moment (the same arithmetic, element by element); the moments take 1/dp of the
// memory. A save gathers them whole (what trainer_state.hpp writes does not depend on dp), and a
// load keeps this replica's range, so states move between data-parallel sizes.
#pragma once

#include <cstdint>
#include <vector>

#include "model/parallel/communicator.hpp"
#include "model/weights.hpp"

namespace mlpt::ref {

class OptimizerShards {
 public:
  OptimizerShards() = default;  // one replica keeps everything
  OptimizerShards(int replicas, int rank);

  int replicas() const { return replicas_; }
  // This replica's range of a tensor of `numel` elements: [first(numel), first + count(numel)).
  int64_t first(int64_t numel) const { return first_of(rank_, numel); }
  int64_t count(int64_t numel) const { return first_of(rank_ + 1, numel) - first_of(rank_, numel); }
  // Every replica's count, in rank order (an all-gather's receive counts).
  std::vector<size_t> counts(int64_t numel) const;

  // This replica's ranges of every tensor of `whole` (the layout and config stay whole's).
  Weights<float> keep_range(const Weights<float>& whole) const;
  // Every replica's ranges gathered into whole tensors (collective over `group`, the replicas in
  // rank order; NULL with one replica).
  Weights<float> gather_whole(Communicator* group, const Weights<float>& ranges) const;
  // Each trainable tensor of `weights` made whole from its replicas' updated ranges, in place.
  void gather_updated(Communicator* group, Weights<float>& weights, const std::vector<bool>& trainable) const;

 private:
  int64_t first_of(int rank, int64_t numel) const { return numel * rank / replicas_; }
  int replicas_ = 1, rank_ = 0;
};

}  // namespace mlpt::ref
