// What runs episodes, made from the run config: the tokenizer and chat format, the engine and the
// transport receiver that brings it every weight version, the sandboxes, harness and reward. The
// single-process run makes one set; in a distributed run each rollout worker makes its own.
#pragma once

#include <atomic>
#include <memory>
#include <string>

#include "core/components/instances.hpp"
#include "core/plugin/component_set.hpp"
#include "core/rollout/episode.hpp"
#include "core/run/rollout_engine.hpp"
#include "core/run/run_config.hpp"
#include "core/text/chat_format.hpp"
#include "core/text/tokenizer.hpp"

namespace mlpt::run {

// The token that ends an assistant turn (<|im_end|>); throws naming the tokenizer file without it.
int32_t end_of_turn_token(const text::Tokenizer& tokenizer, const std::filesystem::path& file);

class RolloutComponents {
 public:
  // `transport_group` names the weight stream the receiver joins (the sender uses the same name);
  // episodes stop promptly once `cancelled` is set; `engine_group`: the engine group whose rank 0
  // this worker is (NULL: an engine alone).
  RolloutComponents(const RunConfig& config, const plugin::ComponentSet& set, const std::string& transport_group,
                    const std::atomic<bool>* cancelled, const mlpt_component_group* engine_group = nullptr);

  const rollout::EpisodeEnvironment& environment() const { return env_; }
  components::Engine& engine() { return engine_.engine(); }
  refit::WeightReceiver& weights() { return engine_.weights(); }
  // See RolloutEngine::load_weights.
  void load_weights(uint64_t version, int64_t timeout_ms) { engine_.load_weights(version, timeout_ms); }

 private:
  std::shared_ptr<const text::Tokenizer> tokenizer_;
  std::unique_ptr<text::ChatFormat> chat_;
  RolloutEngine engine_;
  std::unique_ptr<components::SandboxRuntime> sandboxes_;
  std::unique_ptr<components::Reward> reward_;
  std::unique_ptr<components::Harness> harness_;
  rollout::EpisodeEnvironment env_{};
};

}  // namespace mlpt::run
