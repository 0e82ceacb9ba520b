#include "core/mllog/init_block.hpp"

#include "core/mllog/keys.hpp"
#include "core/rules/closed_division.hpp"

namespace mlpt::mllog {

RunHyperparameters closed_division_run(int64_t global_batch_size, int64_t seed,
                                       int64_t eval_samples, int64_t train_samples,
                                       int64_t max_steps, int64_t gradient_accumulation_steps,
                                       std::string org, std::string platform) {
  namespace r = rules;
  RunHyperparameters h;
  h.org = std::move(org);
  h.platform = std::move(platform);
  h.division = std::string(r::kDivisionClosed);
  h.seed = seed;
  h.max_steps = max_steps;
  h.global_batch_size = global_batch_size;
  h.max_sequence_length = r::kMaxSequenceLength;
  h.train_samples = train_samples;
  h.eval_samples = eval_samples;
  h.init_checkpoint_step = r::kInitCheckpointStep;
  h.opt_name = std::string(r::kOptimizerName);
  h.base_learning_rate = r::learning_rate(global_batch_size);
  h.end_learning_rate = h.base_learning_rate;  // constant schedule
  h.adamw_beta_1 = r::kAdamBeta1;
  h.adamw_beta_2 = r::kAdamBeta2;
  h.adamw_epsilon = r::kAdamEpsilon;
  h.adamw_weight_decay = r::kWeightDecay;
  h.gradient_clip_norm = r::gradient_clip_norm(global_batch_size);
  h.warmup_steps = r::kWarmupSteps;
  h.decay_schedule = std::string(r::kLearningRateSchedule);
  h.train_temperature = r::kTrainTemperature;
  h.train_top_p = r::kTrainTopP;
  h.validation_temperature = r::kValidationTemperature;
  h.validation_top_p = r::kValidationTopP;
  h.num_prompts_per_step = r::prompts_per_step(global_batch_size);
  h.num_generations_per_prompt = r::kGenerationsPerPrompt;
  h.target_accuracy = r::kTargetAccuracy;
  h.gradient_accumulation_steps = gradient_accumulation_steps;
  return h;
}

void write_init_block(Logger& log, const RunHyperparameters& h, std::source_location where) {
  namespace k = keys;
  const auto meta = nlohmann::json::object();
  auto put = [&](std::string_view key, const nlohmann::json& value) {
    log.event(EventType::point_in_time, key, value, meta, where);
  };
  put(k::kCacheClear, true);
  log.event(EventType::interval_start, k::kInitStart, nullptr, meta, where);
  put(k::kSubmissionBenchmark, std::string(rules::kBenchmarkName));
  put(k::kSubmissionOrg, h.org);
  put(k::kSubmissionDivision, h.division);
  put(k::kSubmissionStatus, h.status);
  put(k::kSubmissionPlatform, h.platform);
  put(k::kSeed, h.seed);
  put(k::kMaxSteps, h.max_steps);
  put(k::kGlobalBatchSize, h.global_batch_size);
  put(k::kMaxSequenceLength, h.max_sequence_length);
  put(k::kTrainSamples, h.train_samples);
  put(k::kEvalSamples, h.eval_samples);
  put(k::kInitCheckpointStep, h.init_checkpoint_step);
  put(k::kOptName, h.opt_name);
  put(k::kOptBaseLearningRate, h.base_learning_rate);
  put(k::kOptEndLearningRate, h.end_learning_rate);
  put(k::kOptAdamwBeta1, h.adamw_beta_1);
  put(k::kOptAdamwBeta2, h.adamw_beta_2);
  put(k::kOptAdamwEpsilon, h.adamw_epsilon);
  put(k::kOptAdamwWeightDecay, h.adamw_weight_decay);
  put(k::kOptGradientClipNorm, h.gradient_clip_norm);
  put(k::kOptLearningRateWarmupSteps, h.warmup_steps);
  put(k::kOptLearningRateDecaySchedule, h.decay_schedule);
  put(k::kTrainTemperature, h.train_temperature);
  put(k::kTrainTopP, h.train_top_p);
  put(k::kValidationTemperature, h.validation_temperature);
  put(k::kValidationTopP, h.validation_top_p);
  put(k::kNumPromptsPerStep, h.num_prompts_per_step);
  put(k::kNumGenerationsPerPrompt, h.num_generations_per_prompt);
  put(k::kTargetAccuracy, h.target_accuracy);
  // 0: not known before training (the run logs the trainer's real micro-batch count after its first step).
  if (h.gradient_accumulation_steps > 0) put(k::kGradientAccumulationSteps, h.gradient_accumulation_steps);
  if (h.precision_linear) put(k::kPrecisionLinear, *h.precision_linear);
  if (h.precision_attention) put(k::kPrecisionAttention, *h.precision_attention);
  if (h.precision_communication) put(k::kPrecisionCommunication, *h.precision_communication);
  if (h.tensor_parallelism) put(k::kTensorParallelism, *h.tensor_parallelism);
  if (h.pipeline_parallelism) put(k::kPipelineParallelism, *h.pipeline_parallelism);
  if (h.context_parallelism) put(k::kContextParallelism, *h.context_parallelism);
  if (h.expert_parallelism) put(k::kExpertParallelism, *h.expert_parallelism);
  if (h.max_trajectory_age_steps) put(k::kMaxTrajectoryAgeSteps, *h.max_trajectory_age_steps);
  for (const auto& [key, value] : h.settings) put(key, value);
}

}  // namespace mlpt::mllog
