// What runs episodes, made from the run config: the tokenizer and chat format, the engine and the
// transport receiver that brings it every weight version, the sandboxes, harness and reward. The
// single-process run makes one set; in a distributed run each rollout worker makes its own.
#pragma once

#include <atomic>
#include <memory>
#include <string>

#include "core/components/instances.hpp"
#include "core/plugin/component_set.hpp"
#include "core/refit/refit_receiver.hpp"
#include "core/rollout/episode.hpp"
#include "core/run/run_config.hpp"
#include "core/text/chat_format.hpp"
#include "core/text/tokenizer.hpp"

namespace mlpt::run {

// The token that ends an assistant turn (<|im_end|>); throws naming the tokenizer file without it.
int32_t end_of_turn_token(const text::Tokenizer& tokenizer, const std::filesystem::path& file);

class RolloutComponents {
 public:
  // `transport_group` names the weight stream the receiver joins (the sender uses the same name);
  // episodes stop promptly once `cancelled` is set.
  RolloutComponents(const RunConfig& config, const plugin::ComponentSet& set, const std::string& transport_group,
                    const std::atomic<bool>* cancelled);

  const rollout::EpisodeEnvironment& environment() const { return env_; }
  components::Engine& engine() { return *engine_; }
  components::Transport& receiver() { return *receiver_; }
  // The engine gets weight version `version` (or newer) and loads it; the caller pauses it around
  // this. Dense: the engine fetches it through the receiver itself (refit/weight_flow). Sparse
  // (`relays_refits`): the host receives the message, rebuilds a sparse refit's against the version
  // held (a message without the refit manifest is the weights themselves) and loads it.
  void load_weights(uint64_t version, int64_t timeout_ms);

 private:
  std::shared_ptr<const text::Tokenizer> tokenizer_;
  std::unique_ptr<text::ChatFormat> chat_;
  std::unique_ptr<components::Engine> engine_;
  std::unique_ptr<components::Transport> receiver_;
  std::unique_ptr<components::SandboxRuntime> sandboxes_;
  std::unique_ptr<components::Reward> reward_;
  std::unique_ptr<components::Harness> harness_;
  rollout::EpisodeEnvironment env_{};
  bool relays_refits_ = false;    // [run] refit = "sparse": the host receives and rebuilds
  refit::RefitReceiver decoder_;  // holds the last version when refits are sparse
};

}  // namespace mlpt::run
