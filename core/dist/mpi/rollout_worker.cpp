#include "core/dist/mpi/rollout_worker.hpp"

#include <map>
#include <cstdio>
#include <memory>
#include <mutex>

#include "core/dist/mpi/engine_rank.hpp"
#include "core/dist/mpi/rank_failure.hpp"
#include "core/dist/run_messages.hpp"
#include "core/error.hpp"
#include "core/plugin/component_set.hpp"
#include "core/refit/weight_flow.hpp"
#include "core/rollout/rollout_pool.hpp"
#include "core/run/rollout_components.hpp"
#include "core/run/rollout_threads.hpp"

namespace mlpt::dist {

RankEnd run_rollout_worker(const run::RunConfig& c, const Placement& placement, plugin::HostServices& host, MpiChannel& channel,
                       const std::string& transport_group, const std::atomic<bool>& interrupted) {
  const int rank = host.rendezvous().process().rank;
  const std::string me = placement.describe(rank);
  std::atomic<bool> cancelled{false};
  // The tasks of the episodes in flight: their requests point at them.
  std::mutex tasks_mutex;
  std::map<uint64_t, std::unique_ptr<nlohmann::json>> tasks;
  try {
    plugin::ComponentSet set(c.components, host);
    const WorkerEngineGroup group(placement, rank, transport_group);  // of one rank, or this worker's engine_ranks
    run::RolloutComponents rollouts(c, set, transport_group, &cancelled, group.get());
    const auto made_pool = run::make_rollout_pool(c.run, rollouts.environment());
    rollout::RolloutPool& pool = *made_pool;
    // However this loop ends, the episodes still in flight are cancelled before the pool waits
    // for them (members go in reverse order).
    struct CancelOnExit {
      std::atomic<bool>& flag;
      ~CancelOnExit() { flag = true; }
    } cancel_on_exit{cancelled};
    const auto model = rollouts.engine().model_info();
    channel.send(Placement::coordinator(), "ready",
                 {{"capacity", c.run.rollout_workers},
                  {"model", {{"vocab_size", model.vocab_size}, {"num_moe_layers", model.num_moe_layers},
                             {"experts_per_token", model.experts_per_token}, {"max_sequence_length", model.max_sequence_length},
                             {"weight_version", model.weight_version}}},
                  {"record_routed_experts", rollouts.environment().record_routed_experts},
                  {"end_of_turn_token", rollouts.environment().stop_tokens.front()}});
    for (;;) {
      RunMessage m = channel.receive(Placement::coordinator(), -1, interrupted, me + " waiting for the coordinator");
      if (m.kind == "episode") {
        auto task = std::make_unique<nlohmann::json>(m.body.at("task"));
        auto request = episode_from(m.body, task.get());
        const uint64_t id = request.id;
        {
          std::lock_guard l(tasks_mutex);
          tasks[id] = std::move(task);
        }
        pool.start(std::move(request), [&, id](rollout::Trajectory&& t, std::exception_ptr error) {
          nlohmann::json body = {{"id", id}};
          try {
            if (error) std::rethrow_exception(error);
            body["trajectory"] = trajectory_json(t);
          } catch (const Error& e) {
            body["error"] = {{"code", e.code()}, {"message", e.what()}};
          } catch (const std::exception& e) {
            body["error"] = {{"code", MLPT_INTERNAL}, {"message", e.what()}};
          }
          channel.send(Placement::coordinator(), "trajectory", body);
          std::lock_guard l(tasks_mutex);
          tasks.erase(id);
        });
      } else if (m.kind == "cancel") {
        for (const auto& id : m.body.at("ids")) {
          try {
            rollouts.engine().cancel(id.get<uint64_t>());
          } catch (const Error&) {  // already finished
          }
        }
      } else if (m.kind == "refit") {
        // Episodes in flight wait in the paused engine; they go on with the new weights.
        rollouts.engine().pause();
        rollouts.load_weights(m.body.at("version").get<uint64_t>(), refit::kTransferTimeoutMs);
        rollouts.engine().resume();
        channel.send(Placement::coordinator(), "refitted", {{"version", m.body.at("version")}});
      } else if (m.kind == "stop") {
        cancelled = true;
        try {
          rollouts.engine().resume();  // requests held by a paused engine must see the cancellation
        } catch (const Error&) {       // it was not paused
        }
        pool.wait_idle();
        return RankEnd{0, m.body.value("rank_lost", false)};
      } else {
        throw Error(MLPT_INTERNAL, "unknown message '" + m.kind + "' from the coordinator");
      }
    }
  } catch (...) {
    return report_rank_failure(std::current_exception(), channel, placement, rank, interrupted);
  }
}

}  // namespace mlpt::dist
