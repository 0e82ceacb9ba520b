// Checks a placement before anything is simulated: a split that leaves no engine replica, or a
// trainer group too small for the trainer state, is a sizing mistake to name, not to simulate.
#include <cstdio>
#include <string>

#include "bench/coordinator_sim/simulation_model.hpp"
#include "core/error.hpp"

namespace mlpt::coordinator_sim {

int64_t engine_replicas(const Placement& p, const SimulationModel& model) {
  const std::string where = "placement (trainer nodes " + std::to_string(p.trainer_nodes) + " of " +
                            std::to_string(p.nodes) + " nodes x " + std::to_string(p.gpus_per_node) + " GPUs)";
  if (p.nodes <= 0 || p.gpus_per_node <= 0 || p.trainer_nodes <= 0 || p.trainer_nodes > p.nodes)
    throw Error(where + ": needs 0 < trainer nodes <= nodes and at least one GPU per node");
  if (p.concurrent_episodes <= 0) throw Error(where + ": concurrent episodes must be positive");
  const int64_t engine_gpus = (p.nodes - p.trainer_nodes) * p.gpus_per_node;
  const int64_t replicas = engine_gpus / model.engine.gpus_per_replica;
  if (replicas == 0)
    throw Error(where + ": no engine capacity: " + std::to_string(engine_gpus) + " GPUs left for engines, a replica needs " +
                std::to_string(model.engine.gpus_per_replica));
  const auto& t = model.trainer;
  const double state = t.total_parameters * t.state_bytes_per_parameter;
  const double memory = static_cast<double>(p.trainer_nodes * p.gpus_per_node) * t.gpu_memory_bytes * t.usable_memory_fraction;
  if (memory < state)
  {
    char why[160];
    std::snprintf(why, sizeof why, ": the trainer group holds %.1f TB, the trainer state needs %.1f TB", memory / 1e12, state / 1e12);
    throw Error(where + why);
  }
  return replicas;
}

}  // namespace mlpt::coordinator_sim
