// The weights' way from trainer to engine after each step, composed from [run] refit: the loop's
// placement decides when (pausing and draining generation); the ends made here (refit/weight_route)
// decide how. Either way the weights go plugin to plugin and the host holds none:
//   dense (the default)  the trainer publishes through the run's transport and the engine fetches
//                        its own layout.
//   sparse               the same through endpoints of the sparse transport plugin, which wrap the
//                        run's and send only what changed (refit/sparse_refit_transport.hpp); the
//                        copies it compares against and rebuilds into are the plugin's.
// When sparse is asked for and cannot be had, the refit goes dense and every version's stats say
// why (RefitStats::fallback: the metrics rows, the progress line).
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "core/components/instances.hpp"
#include "core/plugin/component_set.hpp"
#include "core/refit/refit_stats.hpp"
#include "core/refit/weight_route.hpp"
#include "core/run/run_config.hpp"

namespace mlpt::run {

// Why [run] refit = "sparse" cannot be had with this trainer's weights; empty when it can (or when
// the refit asked for is dense).
std::string sparse_refit_refused(const RunSettings& settings, const components::Trainer& trainer);
// The trainer's end for [run] refit over the run's `endpoint` (joined as `group`): dense when asked,
// or with `refused` saying why sparse is not had.
std::unique_ptr<refit::WeightSender> weight_sender(const RunSettings& settings,
                                                   const plugin::ComponentSet& set,
                                                   components::Transport& endpoint, const std::string& group,
                                                   const std::string& refused);
// The engine's end: with [run] refit = "sparse" the sparse transport's receiver (which hands a
// dense sender's versions over as they came), else the engine fetches from `endpoint` itself.
std::unique_ptr<refit::WeightReceiver> weight_receiver(const RunSettings& settings,
                                                       const plugin::ComponentSet& set,
                                                       components::Transport& endpoint,
                                                       const std::string& group);

// Both ends in one process.
class WeightRefit {
 public:
  // Called after each refit with what the trainer exported.
  using Observer = std::function<void(uint64_t version, const mlpt_named_tensor* exported, size_t count)>;
  // `receiver`: the engine's end (RolloutEngine's), outliving this.
  WeightRefit(const RunSettings& settings, const plugin::ComponentSet& set, components::Trainer& trainer,
              components::Engine& engine, components::Transport& sender, const std::string& group,
              refit::WeightReceiver& receiver, Observer observer);

  // Work on the version the trainer holds that may overlap generation.
  void prepare() { sender_->prepare(trainer_); }
  // Moves the trainer's version `version` into the engine (which the caller has paused), prepared
  // or not. Returns what moved.
  refit::RefitStats deliver(uint64_t version);

 private:
  components::Trainer& trainer_;
  components::Engine& engine_;
  refit::WeightReceiver& receiver_;
  Observer observer_;
  std::unique_ptr<refit::WeightSender> sender_;
};

}  // namespace mlpt::run
