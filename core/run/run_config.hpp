// The run config (`mlpt run CONFIG.toml`): one TOML file with the run, the benchmark block, the
// dataset and the components. Read strictly: unknown keys and impossible values are errors naming
// file, line and key. Relative paths are relative to the config file's folder; ${VAR} expands from
// the environment (e.g. ${MLPT_CACHE_DIR}).
#pragma once

#include <filesystem>
#include <set>
#include <string>
#include <vector>

#include "core/config/components_config.hpp"
#include "core/run/placement_settings.hpp"

namespace mlpt::run {

struct BenchmarkSettings {
  int64_t global_batch_size = 0;           // = num_prompts_per_step × num_generations_per_prompt
  int64_t num_prompts_per_step = 0;
  int64_t num_generations_per_prompt = 16;
  int64_t max_turns = 30;                  // agent iterations: a reply with k tool calls costs k
  int64_t max_sequence_length = 65536;
  int64_t max_new_tokens_per_turn = 8192;  // a cap per engine call (the context limit still rules)
  int64_t max_trajectory_age_steps = 1;
  double learning_rate = 0;                // default: the closed-division formula of the GBS
  double gradient_clip_norm = 0;           // default: the formula
  double target_accuracy = 0.69;
  int64_t first_eval_samples = 0;          // default: GBS·ceil(2.5 + 3840/GBS)
  int64_t eval_k = 4;
  double training_temperature = 1.0, training_top_p = 1.0;
  double validation_temperature = 0.1, validation_top_p = 0.95;
  // Timeouts: rules in the closed division (60 s commands and test runs, 1800 s agent wall clock),
  // settings in the open one.
  double command_timeout_s = 60;           // one command at most (the harness tells the model)
  double test_timeout_s = 60, validation_test_timeout_s = 60;  // the grading test run
  double agent_timeout_s = 1800;           // past it the rollout gets reward 0, ungraded
  // Weight updates wait until every episode in flight has finished all its turns (the reference's
  // in_flight_weight_updates = false), so each trajectory comes from one weight version; true
  // updates between the turns of running episodes instead.
  bool in_flight_weight_updates = false;
  // Rollouts that fail for an infrastructure reason train as zero-reward samples; the run aborts
  // once failures exceed ceil(rate × rollouts finished).
  double max_rollout_failure_rate = 0.05;
  int64_t max_steps = 0;                   // 0: until the target is reached or the data runs out
  // Which keys the file set explicitly (the compliance check requires some to be stated).
  std::set<std::string> stated;
};

struct DatasetSettings {
  std::filesystem::path train, validation;
  int64_t validation_tasks = 0;            // 0 = every row of the validation file
  std::filesystem::path images;            // folder of <repo>_final_<commit>.sif
  std::filesystem::path tokenizer;         // tokenizer.json
  std::string chat_format = "qwen3";       // "qwen3" | "qwen3_5"
  std::string train_sha256, validation_sha256;  // the dataset's identity, when declared
};

struct RunSettings {
  std::string name;
  std::filesystem::path output_dir;
  int64_t seed = 0;
  std::string division = "open";           // closed | open
  std::string org = "mlpt", status = "onprem", platform = "unknown";
  int64_t rollout_workers = 16;            // rollouts (episodes) in flight
  int64_t rollout_threads = 8;             // host threads for their host work (harness, sandbox, reward)
  int64_t grading_threads = 0;             // rollouts graded at once (0: as many as rollout_threads)
  int64_t checkpoint_every_steps = 1;      // 0 = never
  bool record_routed_experts = false;      // R3, when engine and trainer support it
  // How each step's weights reach the engine (run/weight_refit): "dense" plugin to plugin, the
  // trainer publishing through the transport and the engine fetching its own layout (the host
  // holds no weight); "sparse" the host relays only the elements that changed (core/refit/), with
  // a full refit first and every full_refit_every_steps refits (0: only the first), keeping a copy
  // of the weights on each side. Sparse needs whole weights in host memory; else it is dense.
  std::string refit = "dense";
  int64_t full_refit_every_steps = 20;
  // Sparse refit from a trainer's change list: compare anyway and fail the refit whose list leaves a
  // change unmarked (a check of the trainer's promise; costs what a comparing refit costs).
  bool check_change_lists = false;
  // Watching the run (core/observe/): the Prometheus endpoint's port (0: none) and the cap of the
  // timeline trace.json in MiB (0: no timeline); a plugin call running longer than
  // hang_dump_after_s seconds is reported with a flight-recorder dump (0: never).
  int64_t metrics_port = 0;
  int64_t trace_max_mb = 256;
  double hang_dump_after_s = 1800;
};

struct RunConfig {
  std::filesystem::path file;
  RunSettings run;
  BenchmarkSettings benchmark;
  DatasetSettings dataset;
  PlacementSettings placement;  // read always, used when launched on several processes
  std::vector<config::ComponentConfig> components;
};

RunConfig read_run_config(const std::filesystem::path& file);

}  // namespace mlpt::run
