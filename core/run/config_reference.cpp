#include "core/run/config_reference.hpp"

#include <sstream>

#include "core/rules/closed_division.hpp"
#include "core/run/run_config.hpp"

namespace mlpt::run {
namespace {

std::string text(int64_t v) { return std::to_string(v); }
std::string text(double v) {
  std::ostringstream s;
  s << v;
  return s.str();
}
std::string text(bool v) { return v ? "true" : "false"; }
std::string quoted(const std::string& v) { return "\"" + v + "\""; }

const char* kRequired = "(required)";

}  // namespace

const std::vector<ConfigKey>& config_keys() {
  static const std::vector<ConfigKey> keys = [] {
    const RunSettings r{};
    const BenchmarkSettings b{};
    const DatasetSettings d{};
    return std::vector<ConfigKey>{
        {"run", "name", "string", kRequired, "the run's name, in the progress line and the report"},
        {"run", "output_dir", "path", kRequired,
         "where the result log, metrics, report, rollouts and checkpoints go; a folder that holds another run is refused"},
        {"run", "seed", "integer", kRequired, "the run's seed (logged; unique per run of a submission)"},
        {"run", "division", "string", quoted(r.division), "\"closed\" or \"open\": which rules `mlpt check` applies"},
        {"run", "org", "string", quoted(r.org), "submission_org in the result log"},
        {"run", "status", "string", quoted(r.status), "submission_status in the result log (onprem, cloud, preview)"},
        {"run", "platform", "string", quoted(r.platform), "submission_platform in the result log"},
        {"run", "rollout_workers", "integer", text(r.rollout_workers), "rollouts in flight at once"},
        {"run", "rollout_threads", "integer", text(r.rollout_threads),
         "host threads that run the episodes' host work (harness, sandbox, reward); generation waits on none of them"},
        {"run", "grading_threads", "integer", text(r.grading_threads),
         "rollouts graded at once: threads that wait for the reward's hidden-test runs, so grading holds none of "
         "rollout_threads (0: as many as rollout_threads; at most rollout_workers)"},
        {"run", "checkpoint_every_steps", "integer", text(r.checkpoint_every_steps),
         "save the trainer's state and the loop's position every N steps (0: never); `--resume` starts from the last"},
        {"run", "record_routed_experts", "boolean", text(r.record_routed_experts),
         "routing replay (R3): record the engine's routed experts for the trainer, when both support it"},
        {"run", "refit", "string", quoted(r.refit),
         "\"dense\": every weight every step, plugin to plugin (the trainer publishes through the transport, the engine "
         "fetches its own layout; the host holds no weight); \"sparse\": a transport wrapping the run's sends only the "
         "weights that changed (the sparse transport plugin, libmlpt_transport_sparse.so: its endpoints keep the copies "
         "they compare against and rebuild into, the host none; every rebuilt tensor checked by checksum; a trainer that "
         "marks what its step changed (the reference device trainer with its masters split) sends only the marked "
         "elements, nothing compared, each delta checked as sent; a version "
         "goes whole when its measured rates say that is quicker; needs whole weights in host memory, else dense "
         "with the reason in every metrics row)"},
        {"run", "full_refit_every_steps", "integer", text(r.full_refit_every_steps),
         "sparse refit: also move the whole weights every N refits, as a safety (0: only the first)"},
        {"run", "check_change_lists", "boolean", text(r.check_change_lists),
         "sparse refit from a trainer's change list: also compare the versions and fail the refit whose list "
         "leaves a changed element unmarked (checks the trainer's promise; costs what a comparing refit costs)"},
        {"run", "metrics_port", "integer", text(r.metrics_port),
         "serve the run's live metrics for Prometheus at http://HOST:PORT/metrics on every interface (0: no endpoint)"},
        {"run", "trace_max_mb", "integer", text(r.trace_max_mb),
         "the run's timeline (trace.json, for Perfetto) stops taking events past this many MiB (0: no timeline); "
         "under mpirun each rank's part is capped so too, and trace.json holds them all"},
        {"run", "hang_dump_after_s", "number", text(r.hang_dump_after_s),
         "a call into a plugin that has not returned after this many seconds is named on stderr and in a "
         "flight-recorder dump (flight_recorder/dump-N-hang.json, under \"hung_calls\" as it was seen; the calls one "
         "look finds share a dump); the run goes on (0: never)"},
        {"benchmark", "num_prompts_per_step", "integer", kRequired, "prompts per training step"},
        {"benchmark", "num_generations_per_prompt", "integer", text(b.num_generations_per_prompt), "rollouts per prompt (a GRPO group; >= 2)"},
        {"benchmark", "global_batch_size", "integer", "prompts × generations", "sequences per step; must equal num_prompts_per_step × num_generations_per_prompt"},
        {"benchmark", "max_turns", "integer", text(b.max_turns), "agent turns per rollout"},
        {"benchmark", "max_sequence_length", "integer", text(b.max_sequence_length), "tokens per rollout, prompt included"},
        {"benchmark", "max_new_tokens_per_turn", "integer", text(b.max_new_tokens_per_turn), "a cap per engine call (the context limit still rules)"},
        {"benchmark", "max_trajectory_age_steps", "integer", text(b.max_trajectory_age_steps),
         "staleness bound: how many weight versions a trained rollout may lag"},
        {"benchmark", "learning_rate", "float", "1e-6·sqrt(GBS/256)", "AdamW learning rate (constant schedule)"},
        {"benchmark", "gradient_clip_norm", "float", "the closed-division formula of GBS", "gradient clipping norm"},
        {"benchmark", "target_accuracy", "float", text(rules::kTargetAccuracy), "pass@k that ends the run (converged when exceeded)"},
        {"benchmark", "first_eval_samples", "integer", "GBS·ceil(2.5 + 3840/GBS)", "samples at the first evaluation; then one every step"},
        {"benchmark", "eval_k", "integer", text(rules::kEvalPassK), "rollouts per validation task (pass@k)"},
        {"benchmark", "training_temperature", "float", text(rules::kTrainTemperature), "sampling temperature of training rollouts"},
        {"benchmark", "training_top_p", "float", text(rules::kTrainTopP), "top-p of training rollouts, in (0, 1]"},
        {"benchmark", "validation_temperature", "float", text(rules::kValidationTemperature), "sampling temperature of validation rollouts"},
        {"benchmark", "validation_top_p", "float", text(rules::kValidationTopP), "top-p of validation rollouts, in (0, 1]"},
        {"benchmark", "command_timeout_s", "float", text(rules::kCommandTimeoutSeconds), "seconds one sandbox command may run"},
        {"benchmark", "agent_timeout_s", "float", text(rules::kAgentTimeoutSeconds), "wall-clock seconds of one rollout"},
        {"benchmark", "test_timeout_s", "float", text(b.test_timeout_s), "seconds the hidden tests may run when a training rollout is graded"},
        {"benchmark", "validation_test_timeout_s", "float", text(b.validation_test_timeout_s),
         "seconds the hidden tests may run when a validation rollout is graded"},
        {"benchmark", "in_flight_weight_updates", "boolean", text(b.in_flight_weight_updates),
         "false (the reference): a refit waits until every episode in flight has finished; true: weights change between turns"},
        {"benchmark", "max_rollout_failure_rate", "float", text(b.max_rollout_failure_rate),
         "the run aborts once infrastructure failures (back-filled as zero-reward rollouts) pass this fraction of rollouts"},
        {"benchmark", "max_steps", "integer", text(b.max_steps), "stop after N steps (0: one pass over the training data)"},
        {"dataset", "train", "path", kRequired, "training tasks, JSONL, in their fixed order"},
        {"dataset", "validation", "path", kRequired, "validation tasks, JSONL"},
        {"dataset", "validation_tasks", "integer", text(d.validation_tasks), "use the first N validation tasks (0: all)"},
        {"dataset", "images", "path", "(none)", "folder of the tasks' SIF images (<repo>_final_<commit>.sif)"},
        {"dataset", "tokenizer", "path", kRequired, "the model's tokenizer.json"},
        {"dataset", "chat_format", "string", quoted(d.chat_format), "\"qwen3\" or \"qwen3_5\": how turns become tokens"},
        {"dataset", "train_sha256", "string", "\"\"", "the training file's SHA-256, when declared (checked by `check config`)"},
        {"dataset", "validation_sha256", "string", "\"\"", "the validation file's SHA-256, when declared"},
        {"placement", "trainer_ranks", "integer", text(PlacementSettings{}.trainer_ranks),
         "under a launcher (`mpirun -np N mlpt run`, `srun`): processes in the trainer group (data parallel; a "
         "model-parallel trainer needs a multiple of its ranks per replica, e.g. tensor_parallel x expert_parallel), "
         "ranks 1..N; rank 0 is the coordinator and every other rank a rollout worker with its own engine, sandboxes, "
         "harness and reward. One process alone ignores the table"},
        {"placement", "engine_ranks", "integer", text(PlacementSettings{}.engine_ranks),
         "processes per rollout worker: its engine runs as one engine group of that many ranks (the engine's "
         "tensor_parallel x expert_parallel; the transport's receivers count each rank). The ranks after the trainer "
         "group must divide into workers of this many; each worker's first rank runs the episodes"},
        {"placement", "answer_timeout_s", "float", text(PlacementSettings{}.answer_timeout_s),
         "seconds the coordinator waits for a rank's answer (a step, a refit, a checkpoint) before the run stops with an "
         "error naming the rank"},
        {"placement", "heartbeat_timeout_s", "float", text(PlacementSettings{}.heartbeat_timeout_s),
         "every rank sends the coordinator a heartbeat each second; one silent this long is gone (killed, "
         "its node lost, "
         "or hung): a rollout worker is dropped and its episodes in flight back-filled, a trainer rank stops "
         "the run "
         "naming it. At least 2"},
        {"components.KIND", "plugin", "string", kRequired,
         "the plugin's file (a name found in MLPT_PLUGIN_PATH and the plugin folders, or a path); KIND is trainer, engine, "
         "transport, sandbox, reward or harness (all but sandbox required)"},
        {"components.KIND", "name", "string", "\"\" (the only one)", "which component of that kind in the plugin"},
        {"components.KIND", "settings", "table", "{}", "the component's own settings, passed to it as JSON (see the plugin's README)"},
    };
  }();
  return keys;
}

std::string config_reference_markdown() {
  std::ostringstream out;
  out << "# Run config reference\n\n"
      << "Generated by `mlpt config reference` from core/run/config_reference.cpp; a test keeps it up to date.\n"
      << "A run config is one TOML file. Unknown keys and impossible values are errors naming the file, line\n"
      << "and key. Relative paths are relative to the config's folder; `${VAR}` expands from the\n"
      << "environment and `${VAR:-default}` falls back to `default` when VAR is unset or empty.\n";
  std::string table;
  for (const auto& k : config_keys()) {
    if (k.table != table) {
      table = k.table;
      out << "\n## [" << table << "]\n\n| key | type | default | meaning |\n|---|---|---|---|\n";
    }
    out << "| `" << k.key << "` | " << k.type << " | " << k.default_value << " | " << k.meaning << " |\n";
  }
  return out.str();
}

}  // namespace mlpt::run
