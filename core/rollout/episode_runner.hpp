// Where a run's episodes execute: a RolloutPool in this process, or the rollout workers of a
// distributed run (core/dist/mpi/coordinator.hpp). The benchmark loop only starts episodes and
// waits for them to drain.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "core/rollout/episode.hpp"

namespace mlpt::rollout {

class EpisodeRunner {
 public:
  virtual ~EpisodeRunner() = default;
  // Blocks while no place is free, then starts the episode; `done` runs once, on a thread of the
  // runner's. Thread-safe.
  virtual void start(EpisodeRequest request, EpisodeDone done) = 0;
  virtual void wait_idle() = 0;  // blocks until no episode is in flight
  virtual int64_t in_flight() const = 0;
  // Episodes in flight on each place that runs them, by its name as trajectories carry it
  // (Trajectory::rollout_worker; "local": this process).
  virtual std::map<std::string, int64_t> in_flight_by_worker() const { return {{"local", in_flight()}}; }
};

}  // namespace mlpt::rollout
