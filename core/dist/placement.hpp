// Which process of a multi-process run does what ([placement] in the run config): rank 0 is the
// coordinator (scheduler, replay buffer, validation schedule, result log, metrics, report,
// checkpoints), the next `trainer_ranks` ranks are the trainer group (data parallel), and every
// other rank belongs to a rollout worker: `engine_ranks` neighbouring ranks per worker, one engine
// group (engine.h, Engine groups). The worker's group rank 0 runs its episodes (sandboxes, harness,
// reward) and talks to the coordinator; its other ranks only compute with that engine and load
// every weight version with it. One process alone runs everything (MLPT_PROCESS_ROLE_ALL), as
// `mlpt run` always has.
#pragma once

#include <cstdint>
#include <string>

#include "core/run/placement_settings.hpp"
#include "mlpt/mlpt.h"

namespace mlpt::dist {

using run::PlacementSettings;  // the [placement] table

class Placement {
 public:
  // Throws naming `where` (the config's [placement] table) when the world cannot hold the
  // coordinator, the trainer group and at least one rollout worker, or the ranks after the trainer
  // group do not divide into rollout workers of `engine_ranks` ranks.
  Placement(const PlacementSettings& settings, int world_size, const std::string& where = "[placement]");

  int world_size() const { return world_size_; }
  bool alone() const { return world_size_ == 1; }
  mlpt_process_role role(int rank) const;
  static constexpr int coordinator() { return 0; }

  int trainer_ranks() const { return trainer_ranks_; }
  int trainer_rank(int group_rank) const { return 1 + group_rank; }  // world rank of a trainer group rank
  int trainer_group_rank(int rank) const { return role(rank) == MLPT_PROCESS_ROLE_TRAINER ? rank - 1 : -1; }

  int engine_ranks() const { return engine_ranks_; }
  int rollout_workers() const { return (world_size_ - 1 - trainer_ranks_) / engine_ranks_; }
  // The world rank of group rank `engine_rank` of rollout worker `index` (rank 0: the one that talks
  // to the coordinator).
  int rollout_worker_rank(int index, int engine_rank = 0) const { return 1 + trainer_ranks_ + index * engine_ranks_ + engine_rank; }
  // Which rollout worker a rank belongs to (-1: none), and its rank in that worker's engine group.
  int rollout_worker_index(int rank) const {
    return role(rank) == MLPT_PROCESS_ROLE_ENGINE ? (rank - 1 - trainer_ranks_) / engine_ranks_ : -1;
  }
  int engine_group_rank(int rank) const { return role(rank) == MLPT_PROCESS_ROLE_ENGINE ? (rank - 1 - trainer_ranks_) % engine_ranks_ : -1; }

  // "coordinator", "trainer rank N", "rollout worker N", "rollout worker N, engine rank G": how
  // messages name a process.
  std::string describe(int rank) const;

 private:
  int world_size_, trainer_ranks_, engine_ranks_;
};

}  // namespace mlpt::dist
