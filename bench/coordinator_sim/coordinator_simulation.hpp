// A SIMULATION of the benchmark's coordinator at the reference's scale (64 nodes x 4 GPUs, ~256
// concurrent episodes, 16 prompts x 16 rollouts per step): the product's own rollout scheduler,
// replay buffer and train batch (core/rl/) decide what starts, what trains and how stale it is,
// driven by a discrete-event clock; engines, sandboxes and the trainer are timed stand-ins
// (simulation_model.hpp). The loop follows BenchmarkRun's: take the step's groups, train, pause
// and drain every episode in flight, refit, resume, and validate (pass@4, after a drain) from the
// first evaluation point on. It answers how a placement splits GPU time, not how fast mlpt is.
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "bench/coordinator_sim/simulation_model.hpp"

namespace mlpt::coordinator_sim {

struct StepTiming {
  double wait_s = 0;        // the trainer waits for the step's groups
  double train_s = 0;
  double drain_s = 0;       // new episodes held while the ones in flight finish
  double refit_s = 0;
  double validation_s = 0;  // drain and pass@4 validation after this step (0 before the first evaluation)
  int64_t sequences = 0;    // rollouts the step trained on
  int64_t tokens = 0;
  uint64_t max_staleness = 0;  // as the product's TrainBatch computes it
  double step_s() const { return wait_s + train_s + drain_s + refit_s; }
};

struct SimulationResult {
  Placement placement;
  int64_t engine_replicas = 0;
  std::vector<StepTiming> steps;
  std::map<uint64_t, int64_t> staleness;  // trained trajectories by staleness (version at training - generating version)
  double wall_s = 0;
  double trainer_idle_fraction = 0;  // of trainer GPU time, not training (waiting, draining, refitting, validating)
  double engine_idle_fraction = 0;   // of engine GPU time, with no sequence to decode
  double mean_decode_batch = 0;      // sequences per replica decode step, averaged over time
  int64_t validations = 0;
  int64_t episodes = 0, agent_timeouts = 0;
  int64_t max_episodes_in_flight = 0;
};

// Throws mlpt::Error for a placement that cannot run (engine_replicas()).
SimulationResult simulate(const SimulationModel& model, const Placement& placement, uint64_t seed);

}  // namespace mlpt::coordinator_sim
