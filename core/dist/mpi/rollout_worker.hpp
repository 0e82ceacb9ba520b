// A rollout worker of a distributed run: its own engine (or rank 0 of its engine group, the other
// ranks in engine_rank.hpp), sandboxes, harness and reward (run/rollout_components.hpp), running the episodes the coordinator hands it, up to [run]
// rollout_workers at once, and sending each finished trajectory back. Every weight version comes
// from trainer rank 0 through the transport, straight into this process. Messages from the
// coordinator: "episode", "cancel", "refit", "stop"; answers: "ready" (with its capacity),
// "trajectory" (or the episode's error), "refitted"; a failure of the worker itself is sent as
// "failed", then the worker stops.
#pragma once

#include <atomic>
#include <string>

#include "core/dist/mpi/channel.hpp"
#include "core/dist/mpi/rank_failure.hpp"
#include "core/dist/placement.hpp"
#include "core/plugin/host_services.hpp"
#include "core/run/run_config.hpp"

namespace mlpt::dist {

// Returns 0 after "stop" (rank_lost as "stop" says), 3 after a failure the coordinator was told of
// (rank_lost: this rank is the lost one), 130 soon after `interrupted` is set (Ctrl-C reaches every
// rank).
RankEnd run_rollout_worker(const run::RunConfig& config, const Placement& placement, plugin::HostServices& host, MpiChannel& channel,
                       const std::string& transport_group, const std::atomic<bool>& interrupted);

}  // namespace mlpt::dist
