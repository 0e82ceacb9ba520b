#include "core/dist/mpi/engine_rank.hpp"

#include "core/error.hpp"
#include "core/plugin/component_set.hpp"
#include "core/refit/weight_flow.hpp"
#include "core/run/rollout_engine.hpp"

namespace mlpt::dist {

WorkerEngineGroup::WorkerEngineGroup(const Placement& placement, int rank, const std::string& transport_group)
    : name_(transport_group + "/engine/" + std::to_string(placement.rollout_worker_index(rank))) {
  group_ = mlpt_component_group{MLPT_COMPONENT_GROUP_STRUCT_SIZE, {name_.data(), name_.size()}, placement.engine_group_rank(rank),
                                placement.engine_ranks()};
}

RankEnd run_engine_rank(const run::RunConfig& c, const Placement& placement, plugin::HostServices& host, MpiChannel& channel,
                        const std::string& transport_group, const std::atomic<bool>& interrupted) {
  const int rank = host.rendezvous().process().rank;
  try {
    plugin::ComponentSet set(c.components, host);
    const WorkerEngineGroup group(placement, rank, transport_group);
    run::RolloutEngine engine(c, set, transport_group, group.get());
    for (;;) {
      RunMessage m = channel.receive(Placement::coordinator(), -1, interrupted, placement.describe(rank) + " waiting for the coordinator");
      if (m.kind == "refit") {
        // Collective with rank 0's load of the same version (engine.h): this rank's shards only.
        engine.engine().pause();
        engine.load_weights(m.body.at("version").get<uint64_t>(), refit::kTransferTimeoutMs);
        engine.engine().resume();
      } else if (m.kind == "stop") {
        return RankEnd{0, m.body.value("rank_lost", false)};  // the engine's destroy waits for rank 0's
      } else {
        throw Error(MLPT_INTERNAL, "unknown message '" + m.kind + "' from the coordinator");
      }
    }
  } catch (...) {
    return report_rank_failure(std::current_exception(), channel, placement, rank, interrupted);
  }
}

}  // namespace mlpt::dist
