#include "core/run/rollout_engine.hpp"

#include <string>
#include <string_view>

#include "core/error.hpp"

#include "core/refit/refit_manifest.hpp"
#include "core/refit/weight_flow.hpp"

namespace mlpt::run {

RolloutEngine::RolloutEngine(const RunConfig& c, const plugin::ComponentSet& set, const std::string& transport_group,
                             const mlpt_component_group* engine_group)
    : relays_refits_(c.run.refit == "sparse") {
  // An engine older than ABI 1.2 generates on blocking host threads: as many as rollouts in flight.
  try {
    engine_ = set.make<components::Engine>(MLPT_COMPONENT_ENGINE, static_cast<int>(c.run.rollout_workers), engine_group);
  } catch (const Error& e) {
    if (!engine_group) throw;
    // E.g. a tensor_parallel x expert_parallel the placement's engine group does not match.
    throw Error(e.code(), c.file.string() + " [components.engine] as engine rank " + std::to_string(engine_group->rank) + " of " +
                              std::to_string(engine_group->size) + " ([placement] engine_ranks = " +
                              std::to_string(engine_group->size) + "): " + e.what());
  }
  receiver_ = set.make<components::Transport>(MLPT_COMPONENT_TRANSPORT, MLPT_TRANSPORT_RECEIVER, transport_group);
}

void RolloutEngine::load_weights(uint64_t version, int64_t timeout_ms) {
  if (!relays_refits_) {
    refit::fetch(*engine_, *receiver_, version, timeout_ms);
    return;
  }
  auto got = receiver_->receive(version, timeout_ms);
  try {
    // A sparse refit's message starts with its manifest; anything else is the weights themselves.
    if (got.count > 0 &&
        std::string_view(got.tensors[0].name.data, got.tensors[0].name.size) == refit::kManifestName) {
      const auto& rebuilt = decoder_.apply(got.version, got.tensors, got.count);
      engine_->load_weights(got.version, rebuilt.data(), rebuilt.size());
    } else {
      engine_->load_weights(got.version, got.tensors, got.count);
    }
  } catch (...) {
    receiver_->release(got.version);
    throw;
  }
  receiver_->release(got.version);
}

}  // namespace mlpt::run
