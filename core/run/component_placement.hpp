// Where a run's components are, as the benchmark loop uses them: episodes run on the rollout
// engines, steps on the trainer, and each weight version goes from the trainer to every engine.
// LocalPlacement (local_placement.hpp) loads every component into this process; a distributed
// run's coordinator (core/dist/mpi/coordinator.hpp) reaches them on the other ranks over MPI. The
// loop calls the same steps on either and never asks which it has.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/components/instances.hpp"
#include "core/refit/refit_stats.hpp"
#include "core/rollout/episode_runner.hpp"

namespace mlpt::run {

class ComponentPlacement : public rollout::EpisodeRunner {
 public:
  // Episodes: start, wait_idle and in_flight, as EpisodeRunner says.
  // Cancels episodes in flight: their engines stop generating (requests held by a paused engine
  // too) and they report as cancelled.
  virtual void cancel(const std::vector<uint64_t>& ids) = 0;

  // One step of the trainer on `batch` (a trainer group: each rank its share); the metrics of the
  // trainer (group rank 0's).
  virtual std::vector<components::Metric> train_step(const mlpt_train_batch& batch,
                                                     uint64_t* new_version) = 0;

  // Work on the trainer's version `version` that may overlap generation, before the engines are
  // paused for deliver_weights (the sparse refit's encoding). Default: none.
  virtual void prepare_weights(uint64_t version) { (void)version; }
  // Version `version` goes from the trainer to every engine, each paused while it loads (episodes
  // in flight wait in it and go on with the new weights); returns when all have, with what moved.
  virtual refit::RefitStats deliver_weights(uint64_t version) = 0;

  virtual bool can_save_state() const = 0;
  virtual void save_state(const std::string& dir) = 0;
  // The trainer (every rank of it) loads the state; returns its weight version, not yet delivered.
  virtual uint64_t load_state(const std::string& dir) = 0;

  // What the engines are: routing replay (R3) on, the model's shape, and the token that ends a
  // turn (what a back-filled rollout holds).
  virtual bool record_routed_experts() const = 0;
  virtual mlpt_engine_model_info model_info() const = 0;
  virtual int32_t end_of_turn_token() const = 0;
  // Rollout workers that died or went silent and were dropped ("rollout worker N (rank R): why");
  // their episodes in flight were back-filled and the run went on with the others. None in one
  // process.
  virtual std::vector<std::string> lost_workers() const { return {}; }
};

}  // namespace mlpt::run
