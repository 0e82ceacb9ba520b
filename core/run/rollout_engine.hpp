// A rollout worker's engine and the transport receiver that brings it every weight version. In one
// process, and on a worker of one rank, that is the engine the episodes run on; when a worker is an
// engine group of several ranks ([placement] engine_ranks), every rank has one of these: rank 0's
// serves the episodes, the others compute with it from inside the plugin (engine.h, Engine groups)
// and take part in every load, each receiving only its own shards.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "core/components/instances.hpp"
#include "core/plugin/component_set.hpp"
#include "core/refit/weight_route.hpp"
#include "core/run/run_config.hpp"

namespace mlpt::run {

class RolloutEngine {
 public:
  // `transport_group` names the weight stream the receiver joins (the sender uses the same name);
  // `engine_group`: the engine group this rank is one of (NULL: an engine alone); an engine that
  // refuses it is named with the config file and [placement] engine_ranks.
  RolloutEngine(const RunConfig& config, const plugin::ComponentSet& set, const std::string& transport_group,
                const mlpt_component_group* engine_group = nullptr);

  components::Engine& engine() { return *engine_; }
  // The engine's end of every refit ([run] refit, run/weight_refit.hpp).
  refit::WeightReceiver& weights() { return *weights_; }
  // The engine gets weight version `version` (or newer) and loads it through the receiving end
  // [run] refit names (run/weight_refit.hpp); the caller pauses it around this. Collective over an
  // engine group: every rank calls it for every version.
  void load_weights(uint64_t version, int64_t timeout_ms) { weights_->fetch(*engine_, version, timeout_ms); }

 private:
  std::unique_ptr<components::Engine> engine_;
  std::unique_ptr<components::Transport> receiver_;
  std::unique_ptr<refit::WeightReceiver> weights_;  // over receiver_
};

}  // namespace mlpt::run
