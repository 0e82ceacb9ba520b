// The weights' way from trainer to engine after each step. The loop decides when (pausing and
// draining generation); this decides how:
//   dense (the default)  plugin to plugin (refit/weight_flow): the trainer publishes through the
//                        transport and the engine fetches its own layout; the host holds nothing.
//   sparse               the host relays: it exports the trainer's weights, encodes only what
//                        changed (core/refit/), sends that, rebuilds and checks it on the engine's
//                        side and loads it. It keeps a copy of the weights on each side to do so:
//                        a measurement of what a sparse refit saves, not the way a run at scale goes.
#pragma once

#include <functional>
#include <memory>

#include "core/components/instances.hpp"
#include "core/refit/refit_receiver.hpp"
#include "core/refit/refit_sender.hpp"
#include "core/refit/refit_stats.hpp"
#include "core/run/run_config.hpp"

namespace mlpt::run {

// The sparse refit's encoder when settings.refit says "sparse" and the trainer's weights are in host
// memory; null (a dense refit, plugin to plugin) otherwise, saying why on stderr when sparse was
// asked for. A receiving side that relays (refit = "sparse") needs no more: a message that starts
// with the refit manifest is sparse, anything else the weights themselves.
std::unique_ptr<refit::RefitSender> sparse_refit_encoder(const RunSettings& settings,
                                                         const components::Trainer& trainer);

class WeightRefit {
 public:
  // Called after each refit: sparse, with what the trainer exported and what the engine loaded;
  // dense, with the export only (the host never sees what the engine loaded).
  using Observer = std::function<void(uint64_t version, const mlpt_named_tensor* exported, size_t num_exported,
                                      const mlpt_named_tensor* loaded, size_t num_loaded)>;
  // Sparse when settings.refit says so and the trainer's weights are in host memory (else dense,
  // saying why on stderr).
  WeightRefit(const RunSettings& settings, components::Trainer& trainer, components::Engine& engine,
              components::Transport& sender, components::Transport& receiver, Observer observer);

  // Sparse: exports the trainer's weights of `version` and encodes them; generation may go on
  // meanwhile. Dense: notes the version.
  void prepare(uint64_t version);
  // Moves what prepare named into the engine (which the caller has paused). Returns what moved.
  refit::RefitStats deliver();

 private:
  refit::RefitStats deliver_dense();
  void load(uint64_t version, const mlpt_named_tensor* tensors, size_t count);

  components::Trainer& trainer_;
  components::Engine& engine_;
  components::Transport &sender_, &receiver_;
  Observer observer_;
  std::unique_ptr<refit::RefitSender> encoder_;    // null when dense
  std::unique_ptr<refit::RefitReceiver> decoder_;  // null when dense
  uint64_t version_ = 0;
  components::Trainer::Weights weights_{};
  const mlpt_named_tensor* message_ = nullptr;
  size_t message_count_ = 0;
  refit::RefitStats stats_;
};

}  // namespace mlpt::run
