#include "core/run/run_hyperparameters.hpp"

#include <algorithm>
#include <string>

#include "core/mllog/keys.hpp"
#include "core/rules/closed_division.hpp"

namespace mlpt::run {

int64_t run_max_steps(const BenchmarkSettings& b, size_t train_rows) {
  if (b.max_steps > 0) return b.max_steps;
  if (rules::reference_max_steps(b.global_batch_size) > 0)
    return rules::reference_max_steps(b.global_batch_size);
  return std::max<int64_t>(1, static_cast<int64_t>(train_rows) / b.num_prompts_per_step);
}

mllog::RunHyperparameters run_hyperparameters(const RunConfig& c, int64_t max_steps, size_t train_rows,
                                              size_t validation_rows,
                                              std::optional<int64_t> resumed_from_step) {
  namespace k = mllog::keys;
  const auto& b = c.benchmark;
  mllog::RunHyperparameters hp =
      mllog::closed_division_run(b.global_batch_size, c.run.seed, 0, 0, 0, 0, c.run.org, c.run.platform);
  hp.division = c.run.division;
  hp.status = c.run.status;
  hp.max_sequence_length = b.max_sequence_length;
  hp.num_prompts_per_step = b.num_prompts_per_step;
  hp.num_generations_per_prompt = b.num_generations_per_prompt;
  hp.base_learning_rate = hp.end_learning_rate = b.learning_rate;
  hp.gradient_clip_norm = b.gradient_clip_norm;
  hp.train_temperature = b.training_temperature;
  hp.train_top_p = b.training_top_p;
  hp.validation_temperature = b.validation_temperature;
  hp.validation_top_p = b.validation_top_p;
  hp.target_accuracy = b.target_accuracy;
  hp.max_trajectory_age_steps = b.max_trajectory_age_steps;
  if (resumed_from_step) hp.init_checkpoint_step = *resumed_from_step;
  hp.max_steps = max_steps;
  // As the reference logs it: every training row, num_generations_per_prompt (16) samples each.
  hp.train_samples = static_cast<int64_t>(train_rows) * b.num_generations_per_prompt;
  hp.eval_samples = static_cast<int64_t>(validation_rows);

  // The trainer's loss settings as declared, else the reference's (which the reference trainer
  // also defaults to).
  nlohmann::json loss = nlohmann::json::object();
  for (const auto& comp : c.components)
    if (comp.kind == MLPT_COMPONENT_TRAINER && comp.settings.contains("loss") &&
        comp.settings["loss"].is_object())
      loss = comp.settings["loss"];
  hp.settings = {
      {std::string(k::kOptLearningRateDecaySteps), max_steps},  // a constant schedule over the whole run
      {std::string(k::kTisLowerBound), loss.value("tis_min", rules::kTisLowerBound)},
      {std::string(k::kTisUpperBound), loss.value("tis_max", rules::kTisUpperBound)},
      {std::string(k::kLogprobErrorThreshold),
       loss.value("logprob_error_max", rules::kLogprobErrorThreshold)},
      {std::string(k::kForceOnPolicyRatio), !loss.value("ppo_clip", false)},
      {std::string(k::kAgentMaxIterations), b.max_turns},
      {std::string(k::kAgentTimeout), b.agent_timeout_s},
      {std::string(k::kCommandTimeout), b.command_timeout_s},
      {std::string(k::kTestTimeout), b.test_timeout_s},
      {std::string(k::kValidationTestTimeout), b.validation_test_timeout_s},
      {std::string(k::kInFlightWeightUpdates), b.in_flight_weight_updates},
      {std::string(k::kMaxRolloutFailureRate), b.max_rollout_failure_rate}};
  return hp;
}

}  // namespace mlpt::run
