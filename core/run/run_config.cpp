#include "core/run/run_config.hpp"

#include <cstdlib>
#include <functional>
#include <optional>

#include "core/config/component_kinds.hpp"
#include "core/rules/closed_division.hpp"

namespace mlpt::run {
namespace {

std::string expand_env(const std::string& s, const config::TomlTable& t, const std::string& key) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '$' && i + 1 < s.size() && s[i + 1] == '{') {
      size_t end = s.find('}', i);
      if (end == std::string::npos) t.fail(key, "unclosed ${ in \"" + s + "\"");
      // ${VAR} or, as in the shell, ${VAR:-default} (the default when VAR is unset or empty).
      std::string var = s.substr(i + 2, end - i - 2);
      std::optional<std::string> fallback;
      if (auto dash = var.find(":-"); dash != std::string::npos) fallback = var.substr(dash + 2), var.resize(dash);
      const char* value = std::getenv(var.c_str());
      if (value && *value) out += value;
      else if (fallback) out += *fallback;
      else t.fail(key, "environment variable " + var + " is not set (set it, or write ${" + var + ":-default} in the config)");
      i = end;
    } else {
      out += s[i];
    }
  }
  return out;
}

std::filesystem::path path_of(const config::TomlTable& t, const std::string& key, const std::filesystem::path& base,
                              bool required = true) {
  auto v = t.optional<std::string>(key);
  if (!v) {
    if (required) t.fail(key, "is required");
    return {};
  }
  std::filesystem::path p = expand_env(*v, t, key);
  return p.is_absolute() ? p : (base / p).lexically_normal();
}

template <class T>
void positive(const config::TomlTable& t, const std::string& key, T value) {
  if (!(value > 0)) t.fail(key, "must be > 0, got " + std::to_string(value));
}

void in_unit_interval(const config::TomlTable& t, const std::string& key, double v, bool open_low) {
  if (!(v <= 1.0 && (open_low ? v > 0.0 : v >= 0.0))) t.fail(key, "must be in " + std::string(open_low ? "(0, 1]" : "[0, 1]") + ", got " + std::to_string(v));
}

}  // namespace

RunConfig read_run_config(const std::filesystem::path& file) {
  RunConfig c;
  c.file = file;
  auto parsed = config::TomlTable::parse_file(file);
  config::TomlTable root(parsed, file.string());
  const auto base = std::filesystem::absolute(file).parent_path();

  auto run = root.table("run");
  c.run.name = run.get<std::string>("name");
  c.run.output_dir = path_of(run, "output_dir", base);
  c.run.seed = run.get<int64_t>("seed");
  c.run.division = run.get_or<std::string>("division", c.run.division);
  if (c.run.division != rules::kDivisionClosed && c.run.division != rules::kDivisionOpen)
    run.fail("division", "must be \"closed\" or \"open\"");
  c.run.org = run.get_or<std::string>("org", c.run.org);
  c.run.status = run.get_or<std::string>("status", c.run.status);
  c.run.platform = run.get_or<std::string>("platform", c.run.platform);
  c.run.rollout_workers = run.get_or<int64_t>("rollout_workers", c.run.rollout_workers);
  positive(run, "rollout_workers", c.run.rollout_workers);
  c.run.rollout_threads = run.get_or<int64_t>("rollout_threads", c.run.rollout_threads);
  positive(run, "rollout_threads", c.run.rollout_threads);
  c.run.grading_threads = run.get_or<int64_t>("grading_threads", c.run.grading_threads);
  if (c.run.grading_threads < 0 || c.run.grading_threads > c.run.rollout_workers)
    run.fail("grading_threads", "must be in 0..rollout_workers (" + std::to_string(c.run.rollout_workers) +
                                    "): rollouts graded at once (0: as many as rollout_threads)");
  c.run.checkpoint_every_steps = run.get_or<int64_t>("checkpoint_every_steps", c.run.checkpoint_every_steps);
  if (c.run.checkpoint_every_steps < 0) run.fail("checkpoint_every_steps", "must be >= 0");
  c.run.record_routed_experts = run.get_or<bool>("record_routed_experts", false);
  c.run.refit = run.get_or<std::string>("refit", c.run.refit);
  if (c.run.refit != "sparse" && c.run.refit != "dense") run.fail("refit", "must be \"sparse\" or \"dense\"");
  c.run.full_refit_every_steps = run.get_or<int64_t>("full_refit_every_steps", c.run.full_refit_every_steps);
  if (c.run.full_refit_every_steps < 0) run.fail("full_refit_every_steps", "must be >= 0");
  c.run.check_change_lists = run.get_or<bool>("check_change_lists", c.run.check_change_lists);
  c.run.metrics_port = run.get_or<int64_t>("metrics_port", c.run.metrics_port);
  if (c.run.metrics_port < 0 || c.run.metrics_port > 65535) run.fail("metrics_port", "must be a TCP port in 1..65535, or 0 for none");
  c.run.trace_max_mb = run.get_or<int64_t>("trace_max_mb", c.run.trace_max_mb);
  if (c.run.trace_max_mb < 0) run.fail("trace_max_mb", "must be >= 0 (0: no timeline)");
  c.run.hang_dump_after_s = run.get_or<double>("hang_dump_after_s", c.run.hang_dump_after_s);
  if (!(c.run.hang_dump_after_s >= 0)) run.fail("hang_dump_after_s", "must be >= 0 seconds (0: never)");
  run.finish();

  auto& b = c.benchmark;
  auto bench = root.table("benchmark");
  b.num_prompts_per_step = bench.get<int64_t>("num_prompts_per_step");
  positive(bench, "num_prompts_per_step", b.num_prompts_per_step);
  b.num_generations_per_prompt = bench.get_or<int64_t>("num_generations_per_prompt", b.num_generations_per_prompt);
  if (b.num_generations_per_prompt < 2) bench.fail("num_generations_per_prompt", "must be >= 2 (GRPO compares a prompt's rollouts)");
  b.global_batch_size = bench.get_or<int64_t>("global_batch_size", b.num_prompts_per_step * b.num_generations_per_prompt);
  if (b.global_batch_size != b.num_prompts_per_step * b.num_generations_per_prompt)
    bench.fail("global_batch_size", "must equal num_prompts_per_step × num_generations_per_prompt = " +
                                        std::to_string(b.num_prompts_per_step * b.num_generations_per_prompt));
  b.max_turns = bench.get_or<int64_t>("max_turns", b.max_turns);
  positive(bench, "max_turns", b.max_turns);
  b.max_sequence_length = bench.get_or<int64_t>("max_sequence_length", b.max_sequence_length);
  positive(bench, "max_sequence_length", b.max_sequence_length);
  b.max_new_tokens_per_turn = bench.get_or<int64_t>("max_new_tokens_per_turn", b.max_new_tokens_per_turn);
  positive(bench, "max_new_tokens_per_turn", b.max_new_tokens_per_turn);
  b.max_trajectory_age_steps = bench.get_or<int64_t>("max_trajectory_age_steps", b.max_trajectory_age_steps);
  if (b.max_trajectory_age_steps < 0) bench.fail("max_trajectory_age_steps", "must be >= 0");
  b.learning_rate = bench.get_or<double>("learning_rate", rules::learning_rate(b.global_batch_size));
  positive(bench, "learning_rate", b.learning_rate);
  b.gradient_clip_norm = bench.get_or<double>("gradient_clip_norm", rules::gradient_clip_norm(b.global_batch_size));
  positive(bench, "gradient_clip_norm", b.gradient_clip_norm);
  b.target_accuracy = bench.get_or<double>("target_accuracy", rules::kTargetAccuracy);
  in_unit_interval(bench, "target_accuracy", b.target_accuracy, false);
  b.first_eval_samples = bench.get_or<int64_t>("first_eval_samples", rules::first_eval_samples(b.global_batch_size));
  positive(bench, "first_eval_samples", b.first_eval_samples);
  if (b.first_eval_samples % b.global_batch_size != 0)
    bench.fail("first_eval_samples", "must be a multiple of the global batch size " + std::to_string(b.global_batch_size));
  b.eval_k = bench.get_or<int64_t>("eval_k", rules::kEvalPassK);
  positive(bench, "eval_k", b.eval_k);
  b.training_temperature = bench.get_or<double>("training_temperature", rules::kTrainTemperature);
  positive(bench, "training_temperature", b.training_temperature);
  b.training_top_p = bench.get_or<double>("training_top_p", rules::kTrainTopP);
  in_unit_interval(bench, "training_top_p", b.training_top_p, true);
  b.validation_temperature = bench.get_or<double>("validation_temperature", rules::kValidationTemperature);
  positive(bench, "validation_temperature", b.validation_temperature);
  b.validation_top_p = bench.get_or<double>("validation_top_p", rules::kValidationTopP);
  in_unit_interval(bench, "validation_top_p", b.validation_top_p, true);
  b.command_timeout_s = bench.get_or<double>("command_timeout_s", rules::kCommandTimeoutSeconds);
  positive(bench, "command_timeout_s", b.command_timeout_s);
  b.test_timeout_s = bench.get_or<double>("test_timeout_s", rules::kTestTimeoutSeconds);
  positive(bench, "test_timeout_s", b.test_timeout_s);
  b.validation_test_timeout_s = bench.get_or<double>("validation_test_timeout_s", rules::kValidationTestTimeoutSeconds);
  positive(bench, "validation_test_timeout_s", b.validation_test_timeout_s);
  b.agent_timeout_s = bench.get_or<double>("agent_timeout_s", rules::kAgentTimeoutSeconds);
  positive(bench, "agent_timeout_s", b.agent_timeout_s);
  b.in_flight_weight_updates = bench.get_or<bool>("in_flight_weight_updates", b.in_flight_weight_updates);
  b.max_rollout_failure_rate = bench.get_or<double>("max_rollout_failure_rate", b.max_rollout_failure_rate);
  in_unit_interval(bench, "max_rollout_failure_rate", b.max_rollout_failure_rate, false);
  b.max_steps = bench.get_or<int64_t>("max_steps", 0);
  for (const auto& key : bench.keys()) b.stated.insert(key);
  if (b.max_steps < 0) bench.fail("max_steps", "must be >= 0");
  bench.finish();

  auto data = root.table("dataset");
  c.dataset.train = path_of(data, "train", base);
  c.dataset.validation = path_of(data, "validation", base);
  c.dataset.validation_tasks = data.get_or<int64_t>("validation_tasks", 0);
  if (c.dataset.validation_tasks < 0) data.fail("validation_tasks", "must be >= 0");
  c.dataset.images = path_of(data, "images", base, false);
  c.dataset.tokenizer = path_of(data, "tokenizer", base);
  c.dataset.chat_format = data.get_or<std::string>("chat_format", c.dataset.chat_format);
  c.dataset.train_sha256 = data.get_or<std::string>("train_sha256", "");
  c.dataset.validation_sha256 = data.get_or<std::string>("validation_sha256", "");
  if (c.dataset.chat_format != "qwen3" && c.dataset.chat_format != "qwen3_5")
    data.fail("chat_format", "must be \"qwen3\" or \"qwen3_5\"");
  data.finish();

  if (root.has("placement")) {
    auto placement = root.table("placement");
    c.placement.trainer_ranks = placement.get_or<int64_t>("trainer_ranks", c.placement.trainer_ranks);
    positive(placement, "trainer_ranks", c.placement.trainer_ranks);
    c.placement.engine_ranks = placement.get_or<int64_t>("engine_ranks", c.placement.engine_ranks);
    positive(placement, "engine_ranks", c.placement.engine_ranks);
    c.placement.answer_timeout_s = placement.get_or<double>("answer_timeout_s", c.placement.answer_timeout_s);
    positive(placement, "answer_timeout_s", c.placement.answer_timeout_s);
    c.placement.heartbeat_timeout_s =
        placement.get_or<double>("heartbeat_timeout_s", c.placement.heartbeat_timeout_s);
    if (!(c.placement.heartbeat_timeout_s >= 2))  // heartbeats come every second
      placement.fail("heartbeat_timeout_s", "must be >= 2 (ranks send a heartbeat every second), got " +
                                                std::to_string(c.placement.heartbeat_timeout_s));
    placement.finish();
  }

  c.components = config::read_components(root);
  // ${VAR} in component settings expands like the run's own paths (checkpoints live in the cache).
  std::function<void(nlohmann::json&)> expand = [&](nlohmann::json& j) {
    if (j.is_string()) j = expand_env(j.get<std::string>(), root, "components");
    else if (j.is_structured()) for (auto& v : j) expand(v);
  };
  for (auto& comp : c.components) expand(comp.settings);
  for (auto kind : {MLPT_COMPONENT_TRAINER, MLPT_COMPONENT_ENGINE, MLPT_COMPONENT_TRANSPORT, MLPT_COMPONENT_REWARD,
                    MLPT_COMPONENT_HARNESS}) {
    bool found = false;
    for (const auto& comp : c.components) found |= comp.kind == kind;
    if (!found) root.fail("components", std::string("needs a [components.") + config::kind_name(kind) + "] table");
  }
  root.finish();
  return c;
}

}  // namespace mlpt::run
