// The init block of the result log: cache_clear, init_start, the submission_* keys and every
// hyperparameter, in the reference's order (docs/benchmark.md §6). init_stop is NOT written here: the
// caller writes it when initialisation (model load, engine start) is really done, since the
// 30-minute init limit is measured to it.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/mllog/logger.hpp"

namespace mlpt::mllog {

// What the run was configured with. `closed_division_run` fills the benchmark's values; a run in
// the open division may change any field.
struct RunHyperparameters {
  // submission_*
  std::string org;
  std::string division = "closed";  // "closed" | "open"
  std::string status = "onprem";    // submission_status: onprem | cloud | preview | research
  std::string platform;

  int64_t seed = 0;
  int64_t max_steps = 0;
  int64_t global_batch_size = 0;
  int64_t max_sequence_length = 0;
  int64_t train_samples = 0;  // size of the training set (prompts × generations it can supply)
  int64_t eval_samples = 0;   // validation tasks (256 in the reference, 251 after a rule change)
  int64_t init_checkpoint_step = 0;
  std::string opt_name;
  double base_learning_rate = 0;
  double end_learning_rate = 0;
  double adamw_beta_1 = 0;
  double adamw_beta_2 = 0;
  double adamw_epsilon = 0;
  double adamw_weight_decay = 0;
  double gradient_clip_norm = 0;
  int64_t warmup_steps = 0;
  std::string decay_schedule;
  double train_temperature = 0;
  double train_top_p = 0;
  double validation_temperature = 0;
  double validation_top_p = 0;
  int64_t num_prompts_per_step = 0;
  int64_t num_generations_per_prompt = 0;
  double target_accuracy = 0;
  int64_t gradient_accumulation_steps = 0;

  // Optional disclosure keys (written after gradient_accumulation_steps when set).
  std::optional<std::string> precision_linear, precision_attention, precision_communication;
  std::optional<int64_t> tensor_parallelism, pipeline_parallelism, context_parallelism,
      expert_parallelism;
  std::optional<int64_t> max_trajectory_age_steps;
  // The framework's own settings that change the benchmark's numbers (limits, loop and loss
  // settings), logged after everything above in this order; the checker allows unknown keys.
  std::vector<std::pair<std::string, nlohmann::json>> settings;
};

// The closed-division hyperparameters for `global_batch_size` (one of 256/512/1024; not checked
// here: the log checker reports a wrong one). org/platform/seed/max_steps/train_samples/
// eval_samples/gradient_accumulation_steps come from the caller.
RunHyperparameters closed_division_run(int64_t global_batch_size, int64_t seed,
                                       int64_t eval_samples, int64_t train_samples,
                                       int64_t max_steps, int64_t gradient_accumulation_steps,
                                       std::string org, std::string platform);

// Writes cache_clear, init_start, submission_*, then every hyperparameter (one POINT_IN_TIME each).
void write_init_block(Logger& log, const RunHyperparameters& run,
                      std::source_location where = std::source_location::current());

}  // namespace mlpt::mllog
