// The other ranks of a distributed run as the coordinator's benchmark loop uses them: episodes run
// on the rollout workers, steps on the trainer group, and each weight version goes from trainer
// rank 0 to every worker's engine. core/dist/mpi/coordinator.hpp implements it over MPI. A run in
// one process has none: its loop owns the components itself.
#pragma once

#include <string>
#include <vector>

#include "core/components/instances.hpp"
#include "core/refit/refit_stats.hpp"
#include "core/rollout/episode_runner.hpp"

namespace mlpt::run {

class RemoteRanks : public rollout::EpisodeRunner {
 public:
  // Cancels episodes in flight (their engines stop generating; they report as cancelled).
  virtual void cancel(const std::vector<uint64_t>& ids) = 0;
  // One step of the trainer group on `batch` (each rank its share); group rank 0's metrics.
  virtual std::vector<components::Metric> train_step(const mlpt_train_batch& batch, uint64_t* new_version) = 0;
  // Trainer rank 0 sends version `version` (dense, or sparse as [run] refit says) and every engine
  // loads it; returns when all have, with what trainer rank 0 sent.
  virtual refit::RefitStats publish(uint64_t version) = 0;
  virtual bool can_save_state() const = 0;
  virtual void save_state(const std::string& dir) = 0;
  // Every trainer rank loads the state; returns its weight version (not yet published).
  virtual uint64_t load_state(const std::string& dir) = 0;
  // What the engines are (the rollout workers report it): R3 on, and the model's shape.
  virtual bool record_routed_experts() const = 0;
  virtual mlpt_engine_model_info model_info() const = 0;
  // Rollout workers that died or went silent and were dropped ("rollout worker N (rank R): why");
  // their episodes in flight were back-filled and the run went on with the others.
  virtual std::vector<std::string> lost_workers() const = 0;
};

}  // namespace mlpt::run
