// The weights' way from trainer to engine after each step, composed from [run] refit: the loop's
// placement decides when (pausing and draining generation); the ends made here (refit/weight_route)
// decide how:
//   dense (the default)  plugin to plugin: the trainer publishes through the transport and the
//                        engine fetches its own layout; the host holds nothing.
//   sparse               the sparse refit transport wraps the run's endpoints and sends only what
//                        changed (refit/sparse_refit_transport.hpp); the copies it compares against
//                        are the wrapper's.
// When sparse is asked for and cannot be had, the refit goes dense and every version's stats say
// why (RefitStats::fallback: the metrics rows, the progress line).
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "core/components/instances.hpp"
#include "core/refit/refit_stats.hpp"
#include "core/refit/weight_route.hpp"
#include "core/run/run_config.hpp"

namespace mlpt::run {

// Why [run] refit = "sparse" cannot be had with this trainer's weights; empty when it can (or when
// the refit asked for is dense).
std::string sparse_refit_refused(const RunSettings& settings, const components::Trainer& trainer);
// The trainer's end for [run] refit: dense when asked, or with `refused` saying why sparse is not had.
std::unique_ptr<refit::WeightSender> weight_sender(const RunSettings& settings,
                                                   components::Transport& endpoint,
                                                   const std::string& refused);
// The engine's end: the sparse refit's receiver when `sparse`, else the engine fetches itself.
std::unique_ptr<refit::WeightReceiver> weight_receiver(bool sparse, components::Transport& endpoint);

// Both ends in one process.
class WeightRefit {
 public:
  // Called after each refit with what the trainer exported and, when they passed through the host
  // (sparse), the whole tensors the engine loaded (else NULL, 0).
  using Observer =
      std::function<void(uint64_t version, const mlpt_named_tensor* exported, size_t num_exported,
                         const mlpt_named_tensor* loaded, size_t num_loaded)>;
  WeightRefit(const RunSettings& settings, components::Trainer& trainer, components::Engine& engine,
              components::Transport& sender, components::Transport& receiver, Observer observer);

  // Work on the version the trainer holds that may overlap generation (sparse: the encoding).
  void prepare() { sender_->prepare(trainer_); }
  // Moves the trainer's version `version` into the engine (which the caller has paused), prepared
  // or not. Returns what moved.
  refit::RefitStats deliver(uint64_t version);

 private:
  components::Trainer& trainer_;
  components::Engine& engine_;
  Observer observer_;
  std::unique_ptr<refit::WeightSender> sender_;
  std::unique_ptr<refit::WeightReceiver> receiver_;
};

}  // namespace mlpt::run
