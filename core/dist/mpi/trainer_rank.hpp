// A trainer rank of a distributed run: one rank of the trainer group (data parallel over MPI, see
// the trainer's component group). It trains the share of each step's batch the coordinator sends
// it, and group rank 0 streams every new weight version to the rollout workers' engines through
// the transport: weights never pass through the coordinator. Messages (core/dist/mpi/channel.hpp),
// from the coordinator: "train", "publish", "save", "load", "stop"; answers: "ready", "trained",
// "published", "saved", "loaded"; any error is sent as "failed" with its message, then the rank
// stops.
#pragma once

#include <atomic>

#include "core/dist/mpi/channel.hpp"
#include "core/dist/mpi/rank_failure.hpp"
#include "core/dist/placement.hpp"
#include "core/plugin/host_services.hpp"
#include "core/run/run_config.hpp"

namespace mlpt::dist {

// Returns when the coordinator says "stop" (0; rank_lost as "stop" says), after a failure it was
// told of (3; rank_lost), or soon after `interrupted` is set (130: Ctrl-C reaches every rank).
RankEnd run_trainer_rank(const run::RunConfig& config, const Placement& placement, plugin::HostServices& host, MpiChannel& channel,
                     const std::string& transport_group, const std::atomic<bool>& interrupted);

}  // namespace mlpt::dist
