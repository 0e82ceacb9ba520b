// The ranks of a rollout worker that is an engine group ([placement] engine_ranks > 1, engine.h
// Engine groups). Group rank 0 is the worker (rollout_worker.hpp): it runs the episodes and talks
// to the coordinator. Every other rank creates its rank of the engine with the group (the ranks
// meet inside the plugin), computes with rank 0 from inside the plugin, and takes part in every
// refit: the coordinator sends "refit" to each rank of the worker, and each fetches only its own
// shards from the transport (its own receiver). Messages from the coordinator: "refit", "stop";
// a failure is sent as "failed" (the coordinator then drops the whole worker).
#pragma once

#include <atomic>
#include <string>

#include "core/dist/mpi/channel.hpp"
#include "core/dist/mpi/rank_failure.hpp"
#include "core/dist/placement.hpp"
#include "core/plugin/host_services.hpp"
#include "core/run/run_config.hpp"
#include "mlpt/mlpt.h"

namespace mlpt::dist {

// The engine group of the rollout worker that `rank` belongs to, named after the run's weight
// stream and the worker, so that each worker's ranks meet only each other.
class WorkerEngineGroup {
 public:
  WorkerEngineGroup(const Placement& placement, int rank, const std::string& transport_group);
  WorkerEngineGroup(const WorkerEngineGroup&) = delete;
  WorkerEngineGroup& operator=(const WorkerEngineGroup&) = delete;
  const mlpt_component_group* get() const { return &group_; }

 private:
  std::string name_;
  mlpt_component_group group_{};
};

// Returns as run_rollout_worker does (rollout_worker.hpp).
RankEnd run_engine_rank(const run::RunConfig& config, const Placement& placement, plugin::HostServices& host, MpiChannel& channel,
                        const std::string& transport_group, const std::atomic<bool>& interrupted);

}  // namespace mlpt::dist
