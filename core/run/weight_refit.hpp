// The weights' way from trainer to engine after each step: the trainer's export, encoded as only
// what changed (sparse) or as is (dense), through the weight transport, rebuilt and checked on the
// engine's side, cut to the shards the engine holds when it holds shards, and loaded. The loop
// decides when (pausing and draining generation); this decides how.
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
// memory; null (a dense refit) otherwise, saying why on stderr when sparse was asked for. The
// receiving side needs no setting: a message that starts with the refit manifest is sparse.
std::unique_ptr<refit::RefitSender> sparse_refit_encoder(const RunSettings& settings,
                                                         const components::Trainer& trainer);

class WeightRefit {
 public:
  using Observer = std::function<void(uint64_t version, const mlpt_named_tensor* exported, size_t num_exported,
                                      const mlpt_named_tensor* loaded, size_t num_loaded)>;
  // Sparse when settings.refit says so and the trainer's weights are in host memory (else dense,
  // saying why on stderr).
  WeightRefit(const RunSettings& settings, components::Trainer& trainer, components::Engine& engine,
              components::Transport& sender, components::Transport& receiver, Observer observer);

  // Exports the trainer's weights of `version` and encodes them; generation may go on meanwhile.
  void prepare(uint64_t version);
  // Sends what prepare encoded, rebuilds it on the engine's side and loads it into the engine
  // (which the caller has paused). Returns what moved.
  refit::RefitStats deliver();

 private:
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
