#include "core/dist/placement.hpp"

#include "core/error.hpp"

namespace mlpt::dist {

Placement::Placement(const PlacementSettings& s, int world_size, const std::string& where)
    : world_size_(world_size), trainer_ranks_(static_cast<int>(s.trainer_ranks)), engine_ranks_(static_cast<int>(s.engine_ranks)) {
  if (world_size < 1) throw Error(MLPT_INVALID_ARGUMENT, "placement: world size " + std::to_string(world_size));
  if (s.trainer_ranks < 1) throw Error(MLPT_INVALID_ARGUMENT, where + " trainer_ranks must be >= 1");
  if (s.engine_ranks < 1) throw Error(MLPT_INVALID_ARGUMENT, where + " engine_ranks must be >= 1");
  if (world_size == 1) return;  // one process ignores the table
  const int64_t worker_ranks = world_size - 1 - s.trainer_ranks;
  const std::string per_worker =
      s.engine_ranks == 1 ? "" : " of engine_ranks = " + std::to_string(s.engine_ranks) + " ranks each";
  if (worker_ranks < s.engine_ranks)
    throw Error(MLPT_INVALID_ARGUMENT, where + " trainer_ranks = " + std::to_string(s.trainer_ranks) + " leaves no rollout worker" +
                                           per_worker + " in " + std::to_string(world_size) + " processes (one coordinator, " +
                                           std::to_string(s.trainer_ranks) + " trainer ranks, at least one rollout worker: start " +
                                           std::to_string(s.trainer_ranks + 1 + s.engine_ranks) + " or more)");
  if (worker_ranks % s.engine_ranks != 0)
    throw Error(MLPT_INVALID_ARGUMENT, where + " engine_ranks = " + std::to_string(s.engine_ranks) + ": the " +
                                           std::to_string(worker_ranks) + " ranks after the coordinator and the trainer_ranks = " +
                                           std::to_string(s.trainer_ranks) + " trainer ranks (of " + std::to_string(world_size) +
                                           " processes) do not divide into rollout workers of " + std::to_string(s.engine_ranks) +
                                           " ranks: start " + std::to_string(1 + s.trainer_ranks + s.engine_ranks * (worker_ranks / s.engine_ranks)) +
                                           " or " + std::to_string(1 + s.trainer_ranks + s.engine_ranks * (worker_ranks / s.engine_ranks + 1)));
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
    default: {
      const int engine_rank = engine_group_rank(rank);
      return "rollout worker " + std::to_string(rollout_worker_index(rank)) +
             (engine_rank > 0 ? ", engine rank " + std::to_string(engine_rank) : "") + " (rank " + std::to_string(rank) + ")";
    }
  }
}

}  // namespace mlpt::dist
