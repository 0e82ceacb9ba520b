#include "core/run/rollout_engine.hpp"

#include <string>

#include "core/error.hpp"
#include "core/run/weight_refit.hpp"

namespace mlpt::run {

RolloutEngine::RolloutEngine(const RunConfig& c, const plugin::ComponentSet& set,
                             const std::string& transport_group, const mlpt_component_group* engine_group) {
  // An engine older than ABI 1.2 generates on blocking host threads: as many as rollouts in flight.
  try {
    engine_ = set.make<components::Engine>(MLPT_COMPONENT_ENGINE, static_cast<int>(c.run.rollout_workers),
                                           engine_group);
  } catch (const Error& e) {
    if (!engine_group) throw;
    // E.g. a tensor_parallel x expert_parallel the placement's engine group does not match.
    throw Error(e.code(),
                c.file.string() + " [components.engine] as engine rank " +
                    std::to_string(engine_group->rank) + " of " + std::to_string(engine_group->size) +
                    " ([placement] engine_ranks = " + std::to_string(engine_group->size) + "): " + e.what());
  }
  receiver_ =
      set.make<components::Transport>(MLPT_COMPONENT_TRANSPORT, MLPT_TRANSPORT_RECEIVER, transport_group);
  weights_ = weight_receiver(c.run, set, *receiver_, transport_group);
}

}  // namespace mlpt::run
