#include "core/dist/placement.hpp"

#include "core/error.hpp"

namespace mlpt::dist {

Placement::Placement(const PlacementSettings& s, int world_size, const std::string& where)
    : world_size_(world_size), trainer_ranks_(static_cast<int>(s.trainer_ranks)) {
  if (world_size < 1) throw Error(MLPT_INVALID_ARGUMENT, "placement: world size " + std::to_string(world_size));
  if (s.trainer_ranks < 1) throw Error(MLPT_INVALID_ARGUMENT, where + " trainer_ranks must be >= 1");
  if (world_size > 1 && 1 + s.trainer_ranks + 1 > world_size)
    throw Error(MLPT_INVALID_ARGUMENT, where + " trainer_ranks = " + std::to_string(s.trainer_ranks) + " leaves no rollout worker in " +
                                           std::to_string(world_size) + " processes (one coordinator, " +
                                           std::to_string(s.trainer_ranks) + " trainer ranks, at least one rollout worker: start " +
                                           std::to_string(s.trainer_ranks + 2) + " or more)");
}

mlpt_process_role Placement::role(int rank) const {
  if (world_size_ == 1) return MLPT_PROCESS_ROLE_ALL;
  if (rank == coordinator()) return MLPT_PROCESS_ROLE_HOST;
  if (rank <= trainer_ranks_) return MLPT_PROCESS_ROLE_TRAINER;
  return MLPT_PROCESS_ROLE_ENGINE;
}

std::string Placement::describe(int rank) const {
  switch (role(rank)) {
    case MLPT_PROCESS_ROLE_ALL: return "the only process";
    case MLPT_PROCESS_ROLE_HOST: return "the coordinator (rank 0)";
    case MLPT_PROCESS_ROLE_TRAINER: return "trainer rank " + std::to_string(trainer_group_rank(rank)) + " (rank " + std::to_string(rank) + ")";
    default: return "rollout worker " + std::to_string(rollout_worker_index(rank)) + " (rank " + std::to_string(rank) + ")";
  }
}

}  // namespace mlpt::dist
