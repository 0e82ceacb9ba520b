#include "core/run/rollout_components.hpp"

#include <string_view>

#include "core/refit/refit_manifest.hpp"
#include "core/refit/weight_flow.hpp"

namespace mlpt::run {

int32_t end_of_turn_token(const text::Tokenizer& tokenizer, const std::filesystem::path& file) {
  auto im_end = tokenizer.token_to_id("<|im_end|>");
  if (!im_end) throw Error(MLPT_INVALID_ARGUMENT, file.string() + ": the tokenizer has no <|im_end|> stop token");
  return *im_end;
}

RolloutComponents::RolloutComponents(const RunConfig& c, const plugin::ComponentSet& set, const std::string& transport_group,
                                     const std::atomic<bool>* cancelled) {
  relays_refits_ = c.run.refit == "sparse";
  tokenizer_ = std::make_shared<const text::Tokenizer>(text::Tokenizer::load(c.dataset.tokenizer));
  chat_ = text::make_chat_format(c.dataset.chat_format, tokenizer_);
  const int32_t im_end = end_of_turn_token(*tokenizer_, c.dataset.tokenizer);
  // An engine older than ABI 1.2 generates on blocking host threads: as many as rollouts in flight.
  engine_ = set.make<components::Engine>(MLPT_COMPONENT_ENGINE, static_cast<int>(c.run.rollout_workers));
  receiver_ = set.make<components::Transport>(MLPT_COMPONENT_TRANSPORT, MLPT_TRANSPORT_RECEIVER, transport_group);
  if (set.has(MLPT_COMPONENT_SANDBOX)) sandboxes_ = set.make<components::SandboxRuntime>(MLPT_COMPONENT_SANDBOX);
  reward_ = set.make<components::Reward>(MLPT_COMPONENT_REWARD);
  harness_ = set.make<components::Harness>(MLPT_COMPONENT_HARNESS);
  // Routing replay (R3) when asked for and both ends support it; the trainer's capabilities are
  // its component's, whether or not it runs in this process.
  const bool replay = c.run.record_routed_experts && engine_->capabilities().returns_routed_experts &&
                      set.component(MLPT_COMPONENT_TRAINER).caps<mlpt_trainer_capabilities>()->supports_routing_replay;
  env_ = rollout::EpisodeEnvironment{engine_.get(), harness_.get(), reward_.get(), sandboxes_.get(), tokenizer_.get(),
                                     chat_.get(), {im_end}, replay, cancelled};
}

void RolloutComponents::load_weights(uint64_t version, int64_t timeout_ms) {
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
