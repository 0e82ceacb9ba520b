// The distributed optimizer (ZeRO stage 1/2, as Megatron-Core's distributed optimizer): every
// tensor is split over the data-parallel replicas of its shard, replica r owning one contiguous
// range of the tensor's elements (for the routed experts the replicas are the ranks holding the
// same experts, for the rest the ranks holding the same shard: the trainer group's data-parallel
// group either way). After the backward the replicas reduce-scatter each gradient, so each holds
// the sum of its range only (half the traffic of an all-reduce); each keeps the Adam moments of
// its range only, steps that range of the weights, and the replicas all-gather each other's
// updated ranges, so every replica holds the whole updated shard. The update is the one of a
// replica that keeps every moment, element by element (the same arithmetic; the gradient sum's
// order is the reduction's); the moments take 1/dp of the memory. A save gathers each piece's
// rows from the replicas' ranges as it writes them (trainer_state.hpp; the files do not depend
// on dp), and a load keeps this replica's range, so states move between data-parallel sizes.
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
  // The data-parallel gradient sum: each trainable tensor of `grads` reduce-scattered over `group`
  // (collective; NULL with one replica), its range here then holding the replicas' sum (the rest
  // stays this replica's own gradient, read by nobody).
  void reduce_scatter(Communicator* group, Weights<float>& grads, const std::vector<bool>& trainable) const;
  // Adds x² of every element of this replica's range of `values` (the whole with one replica) to
  // `squares`, in order: each element of a tensor counted on one replica only.
  void add_range_squares(const std::vector<float>& values, double& squares) const;
  // Each trainable tensor of `weights` made whole from its replicas' updated ranges, in place.
  void gather_updated(Communicator* group, Weights<float>& weights, const std::vector<bool>& trainable) const;

 private:
  int64_t first_of(int rank, int64_t numel) const { return numel * rank / replicas_; }
  int replicas_ = 1, rank_ = 0;
};

}  // namespace mlpt::ref
