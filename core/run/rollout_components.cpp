#include "core/run/rollout_components.hpp"

namespace mlpt::run {

int32_t end_of_turn_token(const text::Tokenizer& tokenizer, const std::filesystem::path& file) {
  auto im_end = tokenizer.token_to_id("<|im_end|>");
  if (!im_end) throw Error(MLPT_INVALID_ARGUMENT, file.string() + ": the tokenizer has no <|im_end|> stop token");
  return *im_end;
}

RolloutComponents::RolloutComponents(const RunConfig& c, const plugin::ComponentSet& set, const std::string& transport_group,
                                     const std::atomic<bool>* cancelled, const mlpt_component_group* engine_group)
    : engine_(c, set, transport_group, engine_group) {
  tokenizer_ = std::make_shared<const text::Tokenizer>(text::Tokenizer::load(c.dataset.tokenizer));
  chat_ = text::make_chat_format(c.dataset.chat_format, tokenizer_);
  const int32_t im_end = end_of_turn_token(*tokenizer_, c.dataset.tokenizer);
  if (set.has(MLPT_COMPONENT_SANDBOX)) sandboxes_ = set.make<components::SandboxRuntime>(MLPT_COMPONENT_SANDBOX);
  reward_ = set.make<components::Reward>(MLPT_COMPONENT_REWARD);
  harness_ = set.make<components::Harness>(MLPT_COMPONENT_HARNESS);
  // Routing replay (R3) when asked for and both ends support it; the trainer's capabilities are
  // its component's, whether or not it runs in this process.
  const bool replay = c.run.record_routed_experts && engine().capabilities().returns_routed_experts &&
                      set.component(MLPT_COMPONENT_TRAINER).caps<mlpt_trainer_capabilities>()->supports_routing_replay;
  env_ = rollout::EpisodeEnvironment{&engine(), harness_.get(), reward_.get(), sandboxes_.get(), tokenizer_.get(),
                                     chat_.get(), {im_end}, replay, cancelled};
}

}  // namespace mlpt::run
