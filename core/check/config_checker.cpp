#include "core/check/config_checker.hpp"

#include <algorithm>
#include <optional>
#include <sstream>

#include "core/config/component_kinds.hpp"
#include "core/plugin/host_services.hpp"
#include "core/plugin/plugin.hpp"
#include "core/plugin/plugin_dirs.hpp"
#include "core/rules/closed_division.hpp"
#include "core/run/dataset.hpp"

namespace mlpt::check {
namespace {

std::string num(double v) {
  std::ostringstream o;
  o.precision(12);
  o << v;
  return o.str();
}

class Rules {
 public:
  explicit Rules(const std::string& file) : file_(file) {}
  // Adds a rule; `ok` false adds one violation with `message`.
  // `where`: the file:line the violation points at (default: the config file).
  void add(const std::string& id, const std::string& description, const std::string& evidence, bool ok,
           const std::string& message = "", const std::string& where = "") {
    RuleResult r{id, description, evidence, {}};
    if (!ok)
      r.violations.push_back(
          Violation{id, 0, (where.empty() ? file_ : where) + ": " + (message.empty() ? evidence : message)});
    rules.push_back(std::move(r));
  }
  std::vector<RuleResult> rules;

 private:
  std::string file_;
};

// The ranks one copy of a component's model takes: the product of its tensor_parallel,
// expert_parallel and pipeline_parallel settings (1 where unset; expert_tensor_parallel re-splits
// the same ranks). Empty with `error` set when a setting is not a positive integer.
std::optional<int64_t> layout_ranks(const config::ComponentConfig& component, std::string& error) {
  int64_t ranks = 1;
  for (const char* key : {"tensor_parallel", "expert_parallel", "pipeline_parallel"}) {
    const nlohmann::json& s = component.settings;
    if (!s.is_object() || !s.contains(key)) continue;
    if (!s[key].is_number_integer() || s[key].get<int64_t>() < 1) {
      error = std::string(key) + " = " + s[key].dump() + " is not a positive integer";
      return std::nullopt;
    }
    ranks *= s[key].get<int64_t>();
  }
  return ranks;
}

// [placement] holds the trainer's and the engine's layouts: each trainer replica takes
// tensor_parallel x expert_parallel x pipeline_parallel of the trainer ranks, and an engine group
// is exactly one engine's layout. Without the table a run is one process and each layout one rank.
void check_placement(const run::RunConfig& c, Rules& r) {
  const auto& p = c.placement;
  for (const auto& component : c.components) {
    const bool trainer = component.kind == MLPT_COMPONENT_TRAINER,
               engine = component.kind == MLPT_COMPONENT_ENGINE;
    if (!trainer && !engine) continue;
    const std::string kind = config::kind_name(component.kind);
    std::string error;
    const auto ranks = layout_ranks(component, error);
    const int64_t have = trainer ? p.trainer_ranks : p.engine_ranks;
    const std::string key = trainer ? "trainer_ranks" : "engine_ranks";
    const std::string evidence = "[components." + kind + ".settings] layout of " +
                                 (ranks ? std::to_string(*ranks) : std::string("?")) +
                                 " rank(s); [placement] " + key + " = " + std::to_string(have);
    const bool ok = ranks && (trainer ? have % *ranks == 0 : have == *ranks);
    std::string message = error;
    if (ranks && !ok)
      message = trainer ? "[placement] trainer_ranks = " + std::to_string(have) +
                              " is not a multiple of the trainer's " + std::to_string(*ranks) +
                              " ranks per replica (tensor_parallel x expert_parallel x "
                              "pipeline_parallel)"
                        : "[placement] engine_ranks = " + std::to_string(have) + " is not the engine's " +
                              std::to_string(*ranks) +
                              " ranks (tensor_parallel x expert_parallel x pipeline_parallel)";
    r.add("placement_" + kind,
          "the " + kind + "'s parallel layout fits [placement] (" +
              (trainer ? "trainer_ranks: whole replicas" : "engine_ranks: one engine group") + ")",
          evidence, ok, message, component.where);
  }
}

}  // namespace

bool ConfigReport::compliant() const {
  for (const auto& r : rules)
    if (!r.passed()) return false;
  return true;
}

ConfigReport check_config(const run::RunConfig& c, std::optional<Division> division, bool load_plugins) {
  ConfigReport report;
  report.source = c.file.string();
  report.division = division ? *division : (c.run.division == "open" ? Division::open : Division::closed);
  const bool closed = report.division == Division::closed;
  const auto& b = c.benchmark;
  Rules r(c.file.string());

  r.add("num_generations_per_prompt", "16 rollouts per prompt (a GRPO group)",
        "num_generations_per_prompt = " + std::to_string(b.num_generations_per_prompt),
        b.num_generations_per_prompt == rules::kGenerationsPerPrompt,
        "num_generations_per_prompt must be 16");
  r.add("global_batch_size", "GBS = num_prompts_per_step × 16",
        "global_batch_size = " + std::to_string(b.global_batch_size) +
            ", num_prompts_per_step = " + std::to_string(b.num_prompts_per_step),
        b.global_batch_size == rules::global_batch_size(b.num_prompts_per_step),
        "global_batch_size must equal num_prompts_per_step × 16");
  if (closed)
    r.add("global_batch_size_allowed", "closed division: GBS is 256, 512 or 1024",
          "global_batch_size = " + std::to_string(b.global_batch_size),
          rules::is_allowed_global_batch_size(b.global_batch_size));
  r.add("max_sequence_length", "context of 65536 tokens",
        "max_sequence_length = " + std::to_string(b.max_sequence_length),
        b.max_sequence_length == rules::kMaxSequenceLength);
  r.add("max_turns", "at most 30 agent turns", "max_turns = " + std::to_string(b.max_turns),
        b.max_turns == rules::kMaxTurns);
  r.add("eval_k", "validation is pass@4", "eval_k = " + std::to_string(b.eval_k),
        b.eval_k == rules::kEvalPassK);
  r.add("target_accuracy", "the quality target is pass@4 > 0.69",
        "target_accuracy = " + num(b.target_accuracy), b.target_accuracy == rules::kTargetAccuracy);
  r.add("max_trajectory_age_steps", "the max staleness is stated in the config (it is logged and enforced)",
        b.stated.count("max_trajectory_age_steps")
            ? "max_trajectory_age_steps = " + std::to_string(b.max_trajectory_age_steps)
            : "not stated",
        b.stated.count("max_trajectory_age_steps") != 0,
        "state [benchmark].max_trajectory_age_steps explicitly");
  r.add("timeouts",
        "command timeout 60 s, test run 60 s (training and validation), agent timeout 1800 s (the rules, PR "
        "#598)",
        "command_timeout_s = " + num(b.command_timeout_s) + ", test_timeout_s = " + num(b.test_timeout_s) +
            ", validation_test_timeout_s = " + num(b.validation_test_timeout_s) +
            ", agent_timeout_s = " + num(b.agent_timeout_s),
        b.command_timeout_s == rules::kCommandTimeoutSeconds &&
            b.test_timeout_s == rules::kTestTimeoutSeconds &&
            b.validation_test_timeout_s == rules::kValidationTestTimeoutSeconds &&
            b.agent_timeout_s == rules::kAgentTimeoutSeconds);
  if (closed) {
    const double lr = rules::learning_rate(b.global_batch_size),
                 clip = rules::gradient_clip_norm(b.global_batch_size);
    r.add("learning_rate", "LR = 1e-6·sqrt(GBS/256) within 1e-9",
          "learning_rate = " + num(b.learning_rate) + ", formula " + num(lr),
          rules::within_tolerance(b.learning_rate, lr));
    r.add("gradient_clip_norm", "grad clip = 0.125·sqrt(256/GBS) within 1e-9",
          "gradient_clip_norm = " + num(b.gradient_clip_norm) + ", formula " + num(clip),
          rules::within_tolerance(b.gradient_clip_norm, clip));
    r.add("sampling", "training temperature 1.0 / top-p 1.0, validation 0.1 / 0.95",
          "training " + num(b.training_temperature) + "/" + num(b.training_top_p) + ", validation " +
              num(b.validation_temperature) + "/" + num(b.validation_top_p),
          b.training_temperature == rules::kTrainTemperature && b.training_top_p == rules::kTrainTopP &&
              b.validation_temperature == rules::kValidationTemperature &&
              b.validation_top_p == rules::kValidationTopP);
    const int64_t first = rules::first_eval_samples(b.global_batch_size);
    r.add(
        "eval_schedule", "first evaluation at GBS·ceil(2.5 + 3840/GBS) samples, then every step",
        "first_eval_samples = " + std::to_string(b.first_eval_samples) + ", formula " + std::to_string(first),
        b.first_eval_samples == first);
  }
  // The grading mode of the R2E reward (plugins/reward_r2e README): the closed division grades as
  // R2E-Gym does (`reference`), the open division may also pay only supervised runs (`hardened`, the
  // plugin's default, so a closed config must state `reference`).
  for (const auto& component : c.components) {
    if (component.kind != MLPT_COMPONENT_REWARD) continue;
    const nlohmann::json& s = component.settings;
    std::string mode = "hardened (the default)";
    if (s.is_object() && s.contains("grading_mode"))
      mode = s["grading_mode"].is_string() ? s["grading_mode"].get<std::string>() : s["grading_mode"].dump();
    else if (s.is_object() && s.contains("witness") && s["witness"] == false)
      mode = "reference";  // the older key: no witness is the reference mode
    const bool known = mode == "reference" || mode == "hardened" || mode == "hardened (the default)";
    const std::string where = component.settings_where.count("grading_mode")
                                  ? component.settings_where.at("grading_mode")
                                  : component.where;
    r.add("grading_mode",
          closed ? "closed division: the reward grades as R2E-Gym does (grading_mode = \"reference\")"
                 : "the reward's grading mode is \"reference\" or \"hardened\"",
          "grading_mode = " + mode, known && (!closed || mode == "reference"),
          !known ? "grading_mode must be \"reference\" or \"hardened\", got " + mode
                 : "set [components.reward.settings] grading_mode = \"reference\" (the closed division "
                   "grades as R2E-Gym does)",
          where);
  }
  check_placement(c, r);
  // Dataset identity: declared hashes must match the files; closed requires them to be declared.
  for (auto [name, path, declared] :
       {std::tuple{"train", c.dataset.train, c.dataset.train_sha256},
        std::tuple{"validation", c.dataset.validation, c.dataset.validation_sha256}}) {
    const std::string actual = run::file_sha256(path).value_or("");
    std::string id = std::string("dataset_") + name;
    if (actual.empty()) {
      // The full benchmark dataset is not on every machine: identity is checked where it is.
      r.add(id, "the task file matches its declared SHA-256",
            "not verifiable here: " + path.string() + " is not present" +
                (declared.empty() ? "" : " (declared " + declared + ")"),
            true);
      report.unverified.push_back(id);
    } else if (declared.empty()) {
      r.add(id, "the task file's SHA-256 is declared ([dataset]." + std::string(name) + "_sha256)",
            path.string() + " sha256 " + actual + " (not declared)", !closed,
            "declare [dataset]." + std::string(name) + "_sha256 = \"" + actual +
                "\" (closed division fixes the dataset)");
    } else {
      r.add(id, "the task file matches its declared SHA-256",
            path.string() + " sha256 " + actual + ", declared " + declared, actual == declared,
            path.string() + " does not match its declared sha256 (the dataset or its order changed)");
    }
  }
  // Every component's plugin is found, loads (ABI negotiated, tables validated) and provides the
  // component named, before anything runs; a failure names the config's file, line and table.
  plugin::HostServices host;
  for (const auto& component : load_plugins ? c.components : std::vector<config::ComponentConfig>{}) {
    const std::string id = std::string("plugin_") + config::kind_name(component.kind);
    const std::string table = "[components." + std::string(config::kind_name(component.kind)) + "]";
    try {
      auto path = plugin::resolve_plugin(component.plugin);
      auto loaded = plugin::Plugin::load(path, host);
      auto found = loaded->component(component.kind, component.name);
      r.add(id, "the " + table + " plugin loads and provides the component",
            path.filename().string() + " " + loaded->version() + ": " + config::kind_name(component.kind) +
                " " + found.name,
            true);
    } catch (const std::exception& e) {
      r.add(id, "the " + table + " plugin loads and provides the component", e.what(), false,
            table + " plugin = \"" + component.plugin + "\": " + e.what(), component.where);
    }
  }
  report.rules = std::move(r.rules);
  return report;
}

nlohmann::json to_json(const ConfigReport& report) {
  nlohmann::json j = {{"source", report.source},
                      {"division", std::string(to_string(report.division))},
                      {"compliant", report.compliant()},
                      {"unverified", report.unverified},
                      {"rules", nlohmann::json::array()}};
  for (const auto& r : report.rules) {
    nlohmann::json v = nlohmann::json::array();
    for (const auto& x : r.violations) v.push_back(x.message);
    j["rules"].push_back({{"id", r.id},
                          {"description", r.description},
                          {"evidence", r.evidence},
                          {"passed", r.passed()},
                          {"violations", v}});
  }
  return j;
}

std::string format_report(const ConfigReport& report) {
  std::ostringstream o;
  o << "config " << report.source << " (" << to_string(report.division) << " division)\n";
  for (const auto& r : report.rules) {
    bool unverified =
        std::find(report.unverified.begin(), report.unverified.end(), r.id) != report.unverified.end();
    o << (!r.passed()  ? "  FAIL  "
          : unverified ? "  SKIP  "
                       : "  PASS  ")
      << r.id << std::string(r.id.size() < 28 ? 28 - r.id.size() : 1, ' ') << r.evidence << "\n";
    for (const auto& v : r.violations) o << "        -> " << v.message << "\n";
  }
  o << (report.compliant() ? "COMPLIANT" : "NOT COMPLIANT");
  if (!report.unverified.empty())
    o << " (" << report.unverified.size() << " rule(s) not verifiable on this machine)";
  o << "\n";
  return o.str();
}

}  // namespace mlpt::check
