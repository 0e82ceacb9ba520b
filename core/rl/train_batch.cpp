#include "core/rl/train_batch.hpp"

#include "core/error.hpp"
#include "core/rl/advantage.hpp"

namespace mlpt::rl {

TrainBatch::TrainBatch(const std::vector<Group>& groups, double advantage_epsilon, uint64_t current_version,
                       bool with_routing, int64_t num_moe_layers, int64_t experts_per_token) {
  offsets_.push_back(0);
  double reward_sum = 0;
  const int64_t per_token_routing = num_moe_layers * experts_per_token;
  for (const auto& g : groups) {
    std::vector<double> rewards;
    for (const auto& s : g.samples) rewards.push_back(s.reward);
    auto adv = leave_one_out_advantages(rewards, advantage_epsilon);
    bool all_zero = true;
    for (double a : adv) all_zero &= (a == 0.0);
    stats_.zero_advantage_groups += all_zero;
    for (size_t i = 0; i < g.samples.size(); ++i) {
      const auto& t = g.samples[i];
      if (t.loss_mask.size() != t.tokens.size() || t.generation_logprobs.size() != t.tokens.size())
        throw Error(MLPT_INTERNAL, "trajectory of prompt " + std::to_string(t.prompt_index) + " has inconsistent per-token arrays");
      tokens_.insert(tokens_.end(), t.tokens.begin(), t.tokens.end());
      loss_mask_.insert(loss_mask_.end(), t.loss_mask.begin(), t.loss_mask.end());
      logprobs_.insert(logprobs_.end(), t.generation_logprobs.begin(), t.generation_logprobs.end());
      if (with_routing && t.failed) {
        routed_.insert(routed_.end(), t.tokens.size() * static_cast<size_t>(per_token_routing), 0);  // trains nothing
      } else if (with_routing) {
        if (static_cast<int64_t>(t.routed_experts.size()) != static_cast<int64_t>(t.tokens.size()) * per_token_routing)
          throw Error(MLPT_INTERNAL, "trajectory of prompt " + std::to_string(t.prompt_index) + " lacks routing for replay");
        routed_.insert(routed_.end(), t.routed_experts.begin(), t.routed_experts.end());
      }
      offsets_.push_back(static_cast<int64_t>(tokens_.size()));
      advantages_.push_back(static_cast<float>(adv[i]));
      truncated_.push_back(t.truncated ? 1 : 0);
      stats_.truncated += t.truncated;
      stats_.failed += t.failed;
      stats_.mixed_version += t.min_weight_version != t.max_weight_version;
      stats_.trainable_tokens += t.generated_tokens();
      reward_sum += t.reward;
      if (current_version >= t.min_weight_version)
        stats_.max_staleness = std::max(stats_.max_staleness, current_version - t.min_weight_version);
    }
  }
  stats_.sequences = static_cast<int64_t>(advantages_.size());
  stats_.tokens = static_cast<int64_t>(tokens_.size());
  stats_.reward_mean = stats_.sequences ? reward_sum / static_cast<double>(stats_.sequences) : 0;

  batch_.struct_size = MLPT_TRAIN_BATCH_STRUCT_SIZE;
  batch_.num_sequences = advantages_.size();
  batch_.offsets = offsets_.data();
  batch_.tokens = tokens_.data();
  batch_.loss_mask = loss_mask_.data();
  batch_.generation_logprobs = logprobs_.data();
  batch_.advantages = advantages_.data();
  batch_.truncated = truncated_.data();
  batch_.routed_experts = with_routing ? routed_.data() : nullptr;
  batch_.num_moe_layers = with_routing ? num_moe_layers : 0;
  batch_.experts_per_token = with_routing ? experts_per_token : 0;
}

}  // namespace mlpt::rl
