// The distributed optimizer (ZeRO stage 1/2, as Megatron-Core's distributed optimizer): every
// tensor is split over the data-parallel replicas of its shard, replica r owning one contiguous
// range of the tensor's elements. The replicas are the ranks holding the same slice of the tensor:
// for the routed experts the ranks holding the same experts (the trainer group's data-parallel
// group), for the rest the ranks holding the same shard of it, which under MoE parallel folding
// (trainer_group.hpp) are the dp · ep ranks of its tensor-parallel place, else the same
// data-parallel group. After the backward the replicas reduce-scatter each gradient, so each holds
// the sum of its range only (half the traffic of an all-reduce); each keeps the Adam moments of
// its range only, steps that range of the weights, and the replicas all-gather each other's
// updated ranges, so every replica holds the whole updated shard. The update is the one of a
// replica that keeps every moment, element by element (the same arithmetic; the gradient sum's
// order is the reduction's); the moments take 1/replicas of the memory. A save gathers each
// piece's rows from the replicas' ranges as it writes them (trainer_state.hpp; the files do not
// depend on the split), and a load keeps this replica's range, so states move between layouts.
#pragma once

#include <cstdint>
#include <vector>

#include "model/parallel/communicator.hpp"
#include "model/weights.hpp"

namespace mlpt::ref {

// How one tensor is split: over `replicas` ranks, this one being `rank`.
class ReplicaSplit {
 public:
  ReplicaSplit() = default;  // one replica keeps everything
  ReplicaSplit(int replicas, int rank);

  int replicas() const { return replicas_; }
  int rank() const { return rank_; }
  // This replica's range of a tensor of `numel` elements: [first(numel), first + count(numel)).
  int64_t first(int64_t numel) const { return first_of(rank_, numel); }
  int64_t count(int64_t numel) const { return first_of(rank_ + 1, numel) - first_of(rank_, numel); }
  // Every replica's count, in rank order (an all-gather's receive counts).
  std::vector<size_t> counts(int64_t numel) const;

 private:
  int64_t first_of(int rank, int64_t numel) const { return numel * rank / replicas_; }
  int replicas_ = 1, rank_ = 0;
};


class OptimizerShards {
 public:
  OptimizerShards() = default;  // one replica keeps everything
  // Every tensor split alike over `replicas` ranks (`group`: them in rank order; NULL with one).
  OptimizerShards(int replicas, int rank, Communicator* group = nullptr);
  // Under MoE parallel folding: the tensors with routed[i] (the routed experts') split over
  // `experts` (`expert_group`), the others over `dense` (`dense_group`).
  OptimizerShards(ReplicaSplit dense, Communicator* dense_group, ReplicaSplit experts,
                  Communicator* expert_group, std::vector<bool> routed);

  // Tensor i's split and the group of its replicas (NULL with one).
  const ReplicaSplit& of(size_t tensor) const { return routed(tensor) ? experts_ : dense_; }
  Communicator* group_of(size_t tensor) const { return routed(tensor) ? expert_group_ : dense_group_; }
  bool routed(size_t tensor) const { return tensor < routed_.size() && routed_[tensor]; }
  // Whether any tensor is split over several replicas.
  bool split() const { return dense_.replicas() > 1 || experts_.replicas() > 1; }

  // This replica's ranges of every tensor of `whole` (the layout and config stay whole's).
  Weights<float> keep_range(const Weights<float>& whole) const;
  // Every replica's ranges gathered into whole tensors (collective over each tensor's replicas).
  Weights<float> gather_whole(const Weights<float>& ranges) const;
  // The data-parallel gradient sum: each trainable tensor of `grads` reduce-scattered over its
  // replicas (collective), its range here then holding the replicas' sum (the rest stays this
  // replica's own gradient, read by nobody).
  void reduce_scatter(Weights<float>& grads, const std::vector<bool>& trainable) const;
  // Adds x² of every element of this replica's range of tensor i's `values` (the whole with one
  // replica) to `squares`, in order: each element of a tensor counted on one replica only.
  void add_range_squares(size_t tensor, const std::vector<float>& values, double& squares) const;
  // Each trainable tensor of `weights` made whole from its replicas' updated ranges, in place.
  void gather_updated(Weights<float>& weights, const std::vector<bool>& trainable) const;

 private:
  ReplicaSplit dense_, experts_;
  Communicator *dense_group_ = nullptr, *expert_group_ = nullptr;
  std::vector<bool> routed_;  // empty: no tensor is split the experts' way
};

}  // namespace mlpt::ref
