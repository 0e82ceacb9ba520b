// The trainer group's data-parallel replicas in a distributed run (trainer.h,
// out_data_parallel_rank): which batch share each trainer rank trains, and which ranks publish the
// weights. The ranks of one replica hold parts of one model (tensor, expert or pipeline
// parallelism): they train the same share, byte for byte, and the ranks of replica 0 publish their
// parts together, each as one sender rank of the transport. A trainer whose every rank is a
// replica of its own (plain data parallelism) has as many shares as ranks and one publisher.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "mlpt/trainer.h"

namespace mlpt::dist {

class TrainerReplicas {
 public:
  struct Replica {
    int rank = 0, size = 1;  // as components::Trainer::data_parallel() gives it
  };
  // `reported[g]`: the replica trainer group rank g reported. Throws MLPT_INVALID_ARGUMENT naming
  // the ranks when they disagree on the number of replicas, a rank is out of range, or the
  // replicas hold different numbers of ranks.
  explicit TrainerReplicas(std::vector<Replica> reported);

  int ranks() const { return static_cast<int>(reported_.size()); }
  int shares() const { return shares_; }  // the number of replicas: the batch is cut into this many shares
  int share_of(int group_rank) const { return reported_.at(static_cast<size_t>(group_rank)).rank; }
  int ranks_per_replica() const { return ranks() / shares_; }
  bool model_parallel() const { return ranks_per_replica() > 1; }

  // The ranks of replica 0 in group-rank order: publisher i is sender rank i of the transport.
  const std::vector<int>& publishers() const { return publishers_; }
  int sender_rank(int group_rank) const;  // -1: this rank does not publish

 private:
  std::vector<Replica> reported_;
  int shares_ = 1;
  std::vector<int> publishers_;
};

// The step's global batch cut into `shares` shares (rl::BatchShare), each encoded once
// (run_messages.hpp): every rank of replica s is sent element s, the same bytes.
std::vector<nlohmann::json> encoded_shares(const mlpt_train_batch& batch, int shares);

}  // namespace mlpt::dist
