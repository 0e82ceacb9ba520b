#include "core/dist/trainer_replicas.hpp"

#include <algorithm>

#include "core/dist/run_messages.hpp"
#include "core/error.hpp"
#include "core/rl/batch_share.hpp"

namespace mlpt::dist {

TrainerReplicas::TrainerReplicas(std::vector<Replica> reported) : reported_(std::move(reported)) {
  if (reported_.empty()) throw Error(MLPT_INVALID_ARGUMENT, "trainer replicas: no trainer rank reported one");
  shares_ = reported_[0].size;
  const std::string of = " of the trainer group of " + std::to_string(ranks()) + " ranks";
  std::vector<int> per_replica(static_cast<size_t>(std::max(shares_, 0)), 0);
  for (int g = 0; g < ranks(); ++g) {
    const Replica& r = reported_[static_cast<size_t>(g)];
    if (r.size != shares_)
      throw Error(MLPT_INVALID_ARGUMENT, "trainer rank " + std::to_string(g) + of + " says there are " + std::to_string(r.size) +
                                             " data-parallel replicas; trainer rank 0 says " + std::to_string(shares_));
    if (r.size < 1 || r.rank < 0 || r.rank >= r.size)
      throw Error(MLPT_INVALID_ARGUMENT, "trainer rank " + std::to_string(g) + of + " is in data-parallel replica " +
                                             std::to_string(r.rank) + " of " + std::to_string(r.size));
    ++per_replica[static_cast<size_t>(r.rank)];
    if (r.rank == 0) publishers_.push_back(g);
  }
  for (int s = 0; s < shares_; ++s)
    if (per_replica[static_cast<size_t>(s)] * shares_ != ranks())
      throw Error(MLPT_INVALID_ARGUMENT, "data-parallel replica " + std::to_string(s) + of + " has " +
                                             std::to_string(per_replica[static_cast<size_t>(s)]) + " ranks; each of the " +
                                             std::to_string(shares_) + " replicas must have " + std::to_string(ranks() / shares_) +
                                             (ranks() % shares_ ? " (the group does not divide into them)" : ""));
}

int TrainerReplicas::sender_rank(int group_rank) const {
  for (size_t i = 0; i < publishers_.size(); ++i)
    if (publishers_[i] == group_rank) return static_cast<int>(i);
  return -1;
}

std::vector<nlohmann::json> encoded_shares(const mlpt_train_batch& batch, int shares) {
  std::vector<nlohmann::json> out;
  out.reserve(static_cast<size_t>(shares));
  for (int s = 0; s < shares; ++s) out.push_back(batch_json(*rl::BatchShare(batch, s, shares).abi()));
  return out;
}

}  // namespace mlpt::dist
