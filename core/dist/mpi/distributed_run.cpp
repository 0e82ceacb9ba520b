#include "core/dist/mpi/distributed_run.hpp"

#include <unistd.h>

#include <cstdio>
#include <optional>

#include "core/dist/mpi/channel.hpp"
#include "core/dist/mpi/coordinator.hpp"
#include "core/dist/mpi/engine_rank.hpp"
#include "core/dist/mpi/heartbeat.hpp"
#include "core/dist/mpi/rendezvous.hpp"
#include "core/dist/mpi/rollout_worker.hpp"
#include "core/dist/mpi/session.hpp"
#include "core/dist/mpi/trainer_rank.hpp"
#include "core/dist/placement.hpp"
#include "core/dist/rank_timeline.hpp"
#include "core/dist/rank_watch.hpp"
#include "core/error.hpp"

namespace mlpt::dist {

namespace {
constexpr int64_t kStartTimeoutMs = 600000;  // every rank reaches its start within minutes
constexpr int kStartFailed = 2;              // mlpt run's status for a config error: nothing ran
constexpr double kPartsCloseWaitS = 10;      // the ranks close their timeline parts once told to stop
}  // namespace

DistributedOutcome run_distributed(const run::RunConfig& config, const run::RunOptions& options) {
  DistributedOutcome outcome;
  outcome.mpi = std::make_unique<MpiSession>();
  const MpiSession& mpi = *outcome.mpi;
  const Placement placement(config.placement, mpi.world_size(), config.file.string() + " [placement]");
  const mlpt_process_role role = placement.role(mpi.rank());
  outcome.coordinator = role == MLPT_PROCESS_ROLE_HOST;
  // Made in the same order on every rank: both are collective.
  plugin::HostServices host;
  host.set_rendezvous(std::make_unique<MpiRendezvous>(role));
  MpiChannel channel;
  // The weight stream's name, the same on every rank: the coordinator's choice.
  const std::atomic<bool> never{false};
  const std::atomic<bool>& interrupted = options.interrupted ? *options.interrupted : never;
  if (outcome.coordinator) {
    host.rendezvous().put("mlpt/run/transport_group", "mlpt-run-" + std::to_string(::getpid()));
    host.rendezvous().put("mlpt/run/folder", config.run.output_dir.string());  // where every rank's dumps go
  }
  const std::string transport_group =
      host.rendezvous().get("mlpt/run/transport_group", kStartTimeoutMs, interrupted);
  std::optional<Heartbeat> heartbeat;  // every rank but the coordinator, from here to its end
  if (role != MLPT_PROCESS_ROLE_HOST)
    heartbeat.emplace(channel, Placement::coordinator(), [&] {
      std::fprintf(stderr, "mlpt run: %s: the coordinator dropped this rollout worker; leaving at once\n",
                   placement.describe(mpi.rank()).c_str());
      MpiSession::leave_job(3);
    });
  // Each rank's part of the timeline goes to a folder of this attempt (the transport group names
  // it: one per coordinator process), merged into trace.json by the coordinator at the end.
  const std::string run_folder = host.rendezvous().get("mlpt/run/folder", kStartTimeoutMs, interrupted);
  const auto timeline_parts = trace_parts_dir(run_folder, transport_group);
  if (role != MLPT_PROCESS_ROLE_HOST) {
    RankWatch watch(mpi.rank(), placement.describe(mpi.rank()), run_folder, config.run.hang_dump_after_s);
    std::optional<RankTimeline> timeline;
    if (config.run.trace_max_mb > 0)
      timeline.emplace(mpi.rank(), placement.describe(mpi.rank()), run_folder, timeline_parts,
                       static_cast<uint64_t>(config.run.trace_max_mb) << 20);
    const RankEnd end =
        role == MLPT_PROCESS_ROLE_TRAINER
            ? run_trainer_rank(config, placement, host, channel, transport_group, interrupted)
        : placement.engine_group_rank(mpi.rank()) > 0
            ? run_engine_rank(config, placement, host, channel, transport_group, interrupted)
            : run_rollout_worker(config, placement, host, channel, transport_group, interrupted);
    outcome.exit_code = end.exit_code;
    outcome.rank_lost = end.rank_lost;
    if (end.exit_code != 0 && end.exit_code != 130)
      watch.failed("the rank ended with status " + std::to_string(end.exit_code));
  } else {
    std::optional<Coordinator> coordinator;
    try {
      coordinator.emplace(channel, placement, config.placement);
    } catch (const Error& e) {
      // A rank that failed to start leaves others waiting for it (in its plugin's collectives, or
      // for a key it would have put) where no "stop" reaches them: nothing is written yet, so say
      // why and end the job.
      std::fprintf(stderr, "mlpt run: %s\nmlpt run: the run did not start; ending every rank\n", e.what());
      MpiSession::abort_job(kStartFailed);
    }
    run::RunOptions with_ranks = options;
    with_ranks.placement = &*coordinator;
    outcome.summary = run::run_benchmark(config, with_ranks);
    outcome.end_job = coordinator->run_failed();
    outcome.rank_lost = coordinator->any_rank_lost();
    coordinator->stop();  // the ranks close their timeline parts as they leave
    merge_rank_timelines(run_folder, timeline_parts, outcome.rank_lost ? 2.0 : kPartsCloseWaitS);
  }
  return outcome;
}

}  // namespace mlpt::dist
