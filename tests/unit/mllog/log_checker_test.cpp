// The compliance checker: a compliant simulated run passes for every GBS of the table; then each
// rule of §6 is broken alone, by one edit of that log, and must fail with the right line.
#include <catch2/catch.hpp>

#include <cmath>

#include "core/check/log_checker.hpp"
#include "core/mllog/keys.hpp"
#include "core/rules/closed_division.hpp"
#include "simulated_run.hpp"

using namespace mlpt;
using check::Division;
using nlohmann::json;
namespace k = mllog::keys;

namespace {

check::LogReport run_check(const test::LogLines& log, check::CheckOptions options = {}) {
  return check::check_log(log.parse(), options);
}

std::string describe(const check::LogReport& rep) {
  std::string s;
  for (const auto& v : rep.violations()) s += "  [" + v.rule + "] line " + std::to_string(v.line) + ": " + v.message + "\n";
  return s.empty() ? "  (no violations)\n" : s;
}

// Exactly the violations expected: all of `rule`, all on `line`.
void require_only(const check::LogReport& rep, const std::string& rule, int64_t line) {
  INFO("violations:\n" << describe(rep));
  auto all = rep.violations();
  REQUIRE(!all.empty());
  CHECK_FALSE(rep.compliant());
  for (const auto& v : all) {
    CHECK(v.rule == rule);
    CHECK(v.line == line);
  }
}

bool has(const check::LogReport& rep, const std::string& rule, int64_t line) {
  for (const auto& v : rep.violations())
    if (v.rule == rule && v.line == line) return true;
  return false;
}

test::LogLines base() { return test::simulate_run({}); }  // GBS 512

// A rule where mlpt is stricter than the MLCommons checker: the log stays compliant (the official
// verdict) and the rule's failure is a warning on `line`.
void require_only_warning(const check::LogReport& rep, const std::string& rule, int64_t line) {
  INFO("violations:\n" << describe(rep));
  CHECK(rep.compliant());
  CHECK(rep.violations().empty());
  auto warnings = rep.warnings();
  REQUIRE(!warnings.empty());
  for (const auto& v : warnings) {
    CHECK(v.rule == rule);
    CHECK(v.line == line);
  }
  CHECK_THAT(check::format_report(rep), Catch::Contains("WARN") && Catch::Contains("warning(s)"));
  CHECK(check::to_json(rep)["warnings"].size() == warnings.size());
}

}  // namespace

TEST_CASE("check log: a simulated run passes for every GBS of the table", "[check]") {
  for (int64_t gbs : {256, 512, 1024}) {
    test::SimulatedRun run{.global_batch_size = gbs, .accuracies = {0.5, 0.62, 0.66, 0.7}};
    auto log = test::simulate_run(run);
    auto rep = run_check(log);
    INFO("GBS " << gbs << "\n" << describe(rep));
    CHECK(rep.compliant());
    CHECK(rep.division == Division::closed);
    CHECK(rep.global_batch_size == gbs);
    CHECK(rep.seed == 1234);
    // The first eval is at the table's sample count.
    auto first = log.record(log.line_of(k::kEvalAccuracy));
    CHECK(first.metadata["samples_count"] == rules::first_eval_samples(gbs));
    CHECK(rep.target_reached_line == log.line_of(k::kEvalAccuracy, 3));
    CHECK(rep.target_reached_samples == rules::first_eval_samples(gbs) + 3 * gbs);
    REQUIRE(rep.time_to_train_minutes);
    CHECK(std::fabs(*rep.time_to_train_minutes - test::expected_minutes(run)) < 1e-9);
    for (const auto& rule : rep.rules) CHECK(!rule.evidence.empty());
  }
}

TEST_CASE("check log: the reports carry every rule, as JSON and as a table", "[check]") {
  auto rep = run_check(base());
  auto j = check::to_json(rep);
  CHECK(j["compliant"] == true);
  CHECK(j["division"] == "closed");
  CHECK(j["rules"].size() == rep.rules.size());
  CHECK(rep.rules.size() >= 40);
  CHECK(j["run"]["converged"] == true);
  auto table = check::format_report(rep);
  CHECK_THAT(table, Catch::Contains("opt_gradient_clip_norm"));
  CHECK_THAT(table, Catch::Contains("COMPLIANT"));
}

TEST_CASE("check log: a missing hyperparameter key", "[check]") {
  auto log = base();
  log.erase(k::kOptAdamwBeta1);
  require_only(run_check(log), "opt_adamw_beta_1", 0);
}

TEST_CASE("check log: a key logged again with the same value is a warning, with another value a failure",
          "[check]") {
  // The MLCommons checker (4.1.59) warns when every occurrence of an exactly-once key has the same
  // value ("Required EXACTLY_ONE occurrence ... but found 2" as a warning) and fails otherwise.
  auto log = base();
  auto dup = log.duplicate(k::kOptAdamwBeta1);
  require_only_warning(run_check(log), "repeated_key", dup);
  log.set_value(k::kOptAdamwBeta1, 0.9, 0);
  log.set_value(k::kOptAdamwBeta1, json(0.95), 1);
  auto rep = run_check(log);
  INFO(describe(rep));
  CHECK(has(rep, "opt_adamw_beta_1", dup));  // logged again with a different value, which is also wrong
  CHECK_FALSE(rep.checker_compliant());
  // init_stop and run_stop repeated unchanged: the checker warns too.
  for (auto key : {k::kInitStop, k::kRunStop}) {
    auto twice = base();
    auto again = twice.duplicate(key);
    INFO("key " << key);
    require_only_warning(run_check(twice), "repeated_key", again);
  }
}

TEST_CASE("check log: learning rate beyond 1e-9 of the formula", "[check]") {
  auto log = base();
  const double lr = rules::learning_rate(512);
  log.set_value(k::kOptBaseLearningRate, lr + 5e-10);  // within tolerance
  CHECK(run_check(log).compliant());
  log.set_value(k::kOptBaseLearningRate, lr + 2e-9);
  require_only(run_check(log), "opt_base_learning_rate", log.line_of(k::kOptBaseLearningRate));
  // The table's rounded value is fine.
  log.set_value(k::kOptBaseLearningRate, 1.4142135624e-6);
  CHECK(run_check(log).compliant());
}

TEST_CASE("check log: a wrong end learning rate (the schedule is constant) is a warning", "[check]") {
  auto log = base();
  log.set_value(k::kOptEndLearningRate, 0.0);
  require_only_warning(run_check(log), "opt_end_learning_rate", log.line_of(k::kOptEndLearningRate));
}

TEST_CASE("check log: a wrong gradient clip", "[check]") {
  auto log = base();
  log.set_value(k::kOptGradientClipNorm, 0.125);  // the GBS-256 value in a GBS-512 run
  require_only(run_check(log), "opt_gradient_clip_norm", log.line_of(k::kOptGradientClipNorm));
}

TEST_CASE("check log: AdamW constants, sampling and schedule values", "[check]") {
  struct Case { std::string_view key; json bad; };
  for (const auto& c : {Case{k::kOptAdamwBeta2, 0.99}, Case{k::kOptAdamwEpsilon, 1e-6},
                        Case{k::kOptAdamwWeightDecay, 0.01}, Case{k::kOptLearningRateWarmupSteps, 10},
                        Case{k::kOptLearningRateDecaySchedule, "cosine"}, Case{k::kTrainTemperature, 0.9},
                        Case{k::kValidationTopP, 1.0}, Case{k::kOptName, "sgd"},
                        Case{k::kInitCheckpointStep, 100},
                        Case{k::kSubmissionBenchmark, "llama31_8b"}, Case{k::kSubmissionOrg, ""}}) {
    auto log = base();
    log.set_value(c.key, c.bad);
    INFO("key " << c.key);
    require_only(run_check(log), std::string(c.key), log.line_of(c.key));
  }
}

TEST_CASE("check log: keys the MLCommons checker does not check are warnings", "[check]") {
  struct Case { std::string_view key; json bad; };
  for (const auto& c : {Case{k::kTargetAccuracy, 0.6}, Case{k::kSeed, "abc"}, Case{k::kSubmissionStatus, ""}}) {
    auto log = base();
    log.set_value(c.key, c.bad);
    INFO("key " << c.key);
    require_only_warning(run_check(log), std::string(c.key), log.line_of(c.key));
  }
  auto log = base();
  auto dup = log.duplicate(k::kSeed);
  require_only_warning(run_check(log), "repeated_key", dup);
}

TEST_CASE("check log: wrong generations per prompt", "[check]") {
  auto log = base();
  log.set_value(k::kNumGenerationsPerPrompt, 8);
  auto rep = run_check(log);
  const auto line = log.line_of(k::kNumGenerationsPerPrompt);
  INFO(describe(rep));
  CHECK(has(rep, "num_generations_per_prompt", line));
  CHECK(has(rep, "gbs_split", line));  // 32 × 8 != 512 as well
  for (const auto& v : rep.violations()) CHECK(v.line == line);
}

TEST_CASE("check log: GBS != prompts × 16", "[check]") {
  auto log = base();
  log.set_value(k::kNumPromptsPerStep, 31);
  // As the reference does, the product is checked on the num_generations_per_prompt line.
  require_only(run_check(log), "gbs_split", log.line_of(k::kNumGenerationsPerPrompt));
}

TEST_CASE("check log: a GBS outside the table fails the rules, the MLCommons checker accepts it", "[check]") {
  auto log = test::simulate_run({.global_batch_size = 768});
  log.set_value(k::kEvalSamples, 256);  // so that the GBS is the only difference
  auto rep = run_check(log, {.expected_eval_samples = 256});
  require_only(rep, "global_batch_size_table", log.line_of(k::kGlobalBatchSize));
  // closed_qwen35_397b_grpo.yaml checks only is_integer(v) and v > 0; the LR, clip and eval points
  // of the simulated run follow the formulas for 768, so the checker's answer is SUCCESS.
  CHECK(rep.checker_compliant());
  CHECK_THAT(check::format_report(rep), Catch::Contains("would answer: SUCCESS"));
  // The open division accepts it.
  auto open = log;
  open.set_value(k::kSubmissionDivision, "open");
  CHECK(run_check(open, {.expected_eval_samples = 256}).compliant());
}

TEST_CASE("check log: wrong max_sequence_length", "[check]") {
  auto log = base();
  log.set_value(k::kMaxSequenceLength, 32768);
  require_only(run_check(log), "max_sequence_length", log.line_of(k::kMaxSequenceLength));
}

TEST_CASE("check log: an eval at the wrong samples_count", "[check]") {
  auto log = base();
  log.set_metadata(k::kEvalAccuracy, "samples_count", 5120 + 2 * 512 + 1, 2);
  require_only(run_check(log), "eval_schedule", log.line_of(k::kEvalAccuracy, 2));
}

TEST_CASE("check log: an extra eval before the first eval point", "[check]") {
  auto log = base();
  auto line = log.line_of(k::kEvalAccuracy);
  auto r = log.record(line);
  r.metadata["samples_count"] = 4608;
  r.value = 0.3;
  log.insert_at(line, mllog::format_line(r.time_ms, r.event_type, r.key, r.value, r.metadata));
  require_only(run_check(log), "eval_schedule", line);
}

TEST_CASE("check log: eval_accuracy without samples_count", "[check]") {
  auto log = base();
  log.erase_metadata(k::kEvalAccuracy, "samples_count", 1);
  auto rep = run_check(log);
  const auto line = log.line_of(k::kEvalAccuracy, 1);
  INFO(describe(rep));
  CHECK(has(rep, "eval_accuracy", line));
  CHECK(has(rep, "eval_schedule", line));
}

TEST_CASE("check log: eval value out of [0, 1] or not a number", "[check]") {
  auto log = base();
  log.set_value(k::kEvalAccuracy, 1.5, 0);
  require_only(run_check(log), "eval_accuracy", log.line_of(k::kEvalAccuracy, 0));
  log = base();
  log.set_value(k::kEvalAccuracy, -0.1, 1);
  require_only(run_check(log), "eval_accuracy", log.line_of(k::kEvalAccuracy, 1));
  log = base();
  log.set_value(k::kEvalAccuracy, "0.5", 0);
  require_only(run_check(log), "eval_accuracy", log.line_of(k::kEvalAccuracy, 0));
}

TEST_CASE("check log: no eval above 0.69 (exactly 0.69 is not enough)", "[check]") {
  auto log = base();
  log.set_value(k::kEvalAccuracy, 0.69, 2);
  auto rep = run_check(log);
  require_only(rep, std::string(check::kTargetRule), 0);
  CHECK_FALSE(rep.converged());
  CHECK_FALSE(rep.time_to_train_minutes);
}

TEST_CASE("check log: init over 30 min closed, 240 min open", "[check]") {
  auto log = base();
  const int64_t t0 = log.record(log.line_of(k::kInitStart)).time_ms;
  log.set_time(k::kInitStop, t0 + 30 * 60 * 1000 - 1);
  CHECK(run_check(log).compliant());
  log.set_time(k::kInitStop, t0 + 30 * 60 * 1000);  // the limit is strict
  require_only(run_check(log), "init_time", log.line_of(k::kInitStop));
  // Open: 31 minutes is fine, 240 is not.
  log.set_value(k::kSubmissionDivision, "open");
  log.set_time(k::kInitStop, t0 + 31 * 60 * 1000);
  CHECK(run_check(log).compliant());
  log.set_time(k::kInitStop, t0 + 240 * 60 * 1000);
  require_only(run_check(log), "init_time", log.line_of(k::kInitStop));
}

TEST_CASE("check log: the init limit counts from the first init_start", "[check]") {
  auto log = base();
  const int64_t t0 = log.record(log.line_of(k::kInitStart)).time_ms;
  // A second init_start (a restart) does not reset the clock.
  auto r = log.record(log.line_of(k::kInitStart));
  r.time_ms = t0 + 25 * 60 * 1000;
  log.insert_at(log.line_of(k::kInitStop), mllog::format_line(r.time_ms, r.event_type, r.key, r.value, r.metadata));
  log.set_time(k::kInitStop, t0 + 35 * 60 * 1000);
  require_only(run_check(log), "init_time", log.line_of(k::kInitStop));
}

TEST_CASE("check log: two run_start is a warning (mlpt is stricter than the MLCommons checker)", "[check]") {
  auto log = base();
  auto dup = log.duplicate(k::kRunStart);
  require_only_warning(run_check(log), "run_start_once", dup);
}

TEST_CASE("check log: run_start before init_stop", "[check]") {
  auto log = base();
  const auto stop = log.line_of(k::kInitStop), start = log.line_of(k::kRunStart);
  log.swap_lines(stop, start);
  auto rep = run_check(log);
  INFO(describe(rep));
  CHECK(has(rep, "run_start", stop));   // run_start now sits on init_stop's old line
  CHECK(has(rep, "init_stop", start));  // and init_stop comes after it
  for (const auto& v : rep.violations()) CHECK((v.rule == "run_start" || v.rule == "init_stop"));
}

TEST_CASE("check log: run_stop without status, with a bad status, or missing", "[check]") {
  auto log = base();
  log.erase_metadata(k::kRunStop, "status");
  auto rep = run_check(log);
  require_only(rep, "run_stop", log.line_of(k::kRunStop));
  CHECK_FALSE(rep.converged());
  log.set_metadata(k::kRunStop, "status", "done");
  require_only_warning(run_check(log), "run_stop_status", log.line_of(k::kRunStop));
  log.erase(k::kRunStop);
  require_only(run_check(log), "run_stop", 0);
}

TEST_CASE("check log: an aborted run is compliant but has no time to train", "[check]") {
  auto log = test::simulate_run({.status = "aborted"});
  auto rep = run_check(log);
  INFO(describe(rep));
  CHECK(rep.compliant());
  CHECK(rep.run_stop_status == "aborted");
  CHECK_FALSE(rep.converged());
}

TEST_CASE("check log: missing train_samples or eval_samples", "[check]") {
  auto log = base();
  log.erase(k::kTrainSamples);
  require_only(run_check(log), "train_samples", 0);
  log = base();
  log.erase(k::kEvalSamples);
  require_only(run_check(log), "eval_samples", 0);
}

bool checker_has(const check::LogReport& rep, const std::string& rule, int64_t line) {
  for (const auto& v : rep.checker_violations())
    if (v.rule == rule && v.line == line) return true;
  return false;
}

TEST_CASE("check log: eval_samples, as the merged rules and as the MLCommons checker 4.1.59 want it",
          "[check]") {
  auto log = base();  // 251 tasks: the merged rules
  const auto line = log.line_of(k::kEvalSamples);
  auto rep = run_check(log);
  INFO(describe(rep));
  CHECK(rep.compliant());
  CHECK(rep.violations().empty());
  // The stored checker still has `v['value'] == 256` in both divisions' rule files.
  CHECK_FALSE(rep.checker_compliant());
  REQUIRE(rep.checker_violations().size() == 1);
  CHECK(checker_has(rep, "eval_samples_checker", line));
  auto table = check::format_report(rep);
  CHECK_THAT(table, Catch::Contains("COMPLIANT with the merged rules"));
  CHECK_THAT(table, Catch::Contains("MLCommons checker 4.1.59 would answer: FAIL"));
  auto j = check::to_json(rep);
  CHECK(j["compliant"] == true);
  CHECK(j["mlcommons_checker"]["compliant"] == false);
  CHECK(j["mlcommons_checker"]["violations"][0]["rule"] == "eval_samples_checker");

  // A log from before the rule change (256): the checker's SUCCESS, the rules' failure.
  log.set_value(k::kEvalSamples, 256);
  rep = run_check(log);
  require_only(rep, "eval_samples_rules", line);
  CHECK(rep.checker_compliant());
  // The count stays configurable: 256 expected, both agree.
  rep = run_check(log, {.expected_eval_samples = 256});
  CHECK(rep.compliant());
  CHECK(rep.checker_compliant());
  // The open division's rule file wants 256 as well.
  log.set_value(k::kSubmissionDivision, "open");
  log.set_value(k::kEvalSamples, 251);
  rep = run_check(log);
  CHECK(rep.compliant());
  CHECK(checker_has(rep, "eval_samples_checker", line));
}

TEST_CASE("check log: keys before global_batch_size fail the MLCommons checker, not the rules", "[check]") {
  // The checker sets s['learning_rate'] and the eval points in global_batch_size's POST and checks
  // num_generations_per_prompt against s['num_prompts_per_step']: a key read before them fails.
  auto log = base();
  log.set_value(k::kEvalSamples, 256);  // so that the order is the checker's only complaint
  const auto gbs = log.line_of(k::kGlobalBatchSize);
  // Move global_batch_size to just after the last hyperparameter it feeds (num_generations_per_prompt).
  const auto gens = log.line_of(k::kNumGenerationsPerPrompt);
  const std::string moved = log.lines[gbs - 1];
  log.lines.erase(log.lines.begin() + (gbs - 1));
  log.insert_at(gens, moved);  // gens moved up by one: this puts GBS right after it
  auto rep = run_check(log, {.expected_eval_samples = 256});
  INFO(describe(rep));
  CHECK(rep.compliant());
  CHECK_FALSE(rep.checker_compliant());
  for (auto key : {k::kOptBaseLearningRate, k::kOptGradientClipNorm, k::kNumGenerationsPerPrompt})
    CHECK(checker_has(rep, "key_order", log.line_of(key)));
  for (const auto& v : rep.checker_violations()) CHECK(v.rule == "key_order");
  // num_prompts_per_step after num_generations_per_prompt fails too.
  auto prompts = base();
  const auto p = prompts.line_of(k::kNumPromptsPerStep), g = prompts.line_of(k::kNumGenerationsPerPrompt);
  prompts.swap_lines(p, g);
  rep = run_check(prompts);
  CHECK(rep.compliant());
  CHECK(checker_has(rep, "key_order", p));  // num_generations_per_prompt now sits on line p
}

TEST_CASE("check log: gradient_accumulation_steps 0 or missing", "[check]") {
  auto log = base();
  log.set_value(k::kGradientAccumulationSteps, 0);
  require_only(run_check(log), "gradient_accumulation_steps", log.line_of(k::kGradientAccumulationSteps));
  auto missing = base();
  missing.erase(k::kGradientAccumulationSteps);
  require_only(run_check(missing), "gradient_accumulation_steps", 0);
  // Open: optional, but still > 0 when logged.
  missing.set_value(k::kSubmissionDivision, "open");
  CHECK(run_check(missing).compliant());
  log.set_value(k::kSubmissionDivision, "open");
  require_only(run_check(log), "gradient_accumulation_steps", log.line_of(k::kGradientAccumulationSteps));
}

TEST_CASE("check log: a malformed line", "[check]") {
  auto log = base();
  const auto line = log.line_of(k::kBlockStart, 3);
  log.insert_at(line, ":::MLLOG {\"namespace\": \"\", \"time_ms\": 17000, \"event_type\": ");
  require_only(run_check(log), "parse", line);
}

TEST_CASE("check log: missing or misplaced structure records", "[check]") {
  auto log = base();
  log.erase(k::kCacheClear);
  require_only(run_check(log), "cache_clear", 0);

  log = base();
  log.erase(k::kInitStop);
  auto rep = run_check(log);
  INFO(describe(rep));
  CHECK(has(rep, "init_stop", 0));
  CHECK(has(rep, "run_start", log.line_of(k::kRunStart)));  // run_start now has no init_stop before it

  log = base();
  log.erase_metadata(k::kBlockStop, "samples_count", 2);
  require_only(run_check(log), "blocks", log.line_of(k::kBlockStop, 2));

  log = base();
  log.erase_metadata(k::kEvalStart, "samples_count", 0);
  require_only(run_check(log), "eval_markers", log.line_of(k::kEvalStart, 0));

  log = base();  // an init_start after run_start
  auto r = log.record(log.line_of(k::kInitStart));
  const auto at = log.line_of(k::kBlockStart, 1);
  log.insert_at(at, mllog::format_line(r.time_ms, r.event_type, r.key, r.value, r.metadata));
  require_only(run_check(log), "init_start", at);
}

TEST_CASE("check log: the division comes from the log unless forced", "[check]") {
  auto log = base();
  require_only(run_check(log, {.division = Division::open}), "submission_division",
               log.line_of(k::kSubmissionDivision));
  log.set_value(k::kSubmissionDivision, "private");
  require_only(run_check(log), "submission_division", log.line_of(k::kSubmissionDivision));
}

TEST_CASE("check log: the open division frees the hyperparameters but not the structure", "[check]") {
  auto log = base();
  log.set_value(k::kSubmissionDivision, "open");
  log.set_value(k::kOptBaseLearningRate, 3e-6);
  log.set_value(k::kOptGradientClipNorm, 1.0);
  log.set_value(k::kTrainTemperature, 0.8);
  log.set_value(k::kNumGenerationsPerPrompt, 8);  // 32 × 8 != 512: allowed in open
  log.set_metadata(k::kEvalAccuracy, "samples_count", 12345, 0);
  auto rep = run_check(log);
  INFO(describe(rep));
  CHECK(rep.division == Division::open);
  CHECK(rep.compliant());
  CHECK(rep.converged());
  // Still required in open: each key once, max_sequence_length, the target.
  auto dup = log;
  auto dup_line = dup.duplicate(k::kOptBaseLearningRate);
  dup.set_value(k::kOptBaseLearningRate, 4e-6, 1);
  require_only(run_check(dup), "opt_base_learning_rate", dup_line);
  auto seq = log;
  seq.set_value(k::kMaxSequenceLength, 131072);
  require_only(run_check(seq), "max_sequence_length", seq.line_of(k::kMaxSequenceLength));
  auto low = log;
  low.set_value(k::kEvalAccuracy, 0.5, 2);
  require_only(run_check(low), std::string(check::kTargetRule), 0);
}

TEST_CASE("check log: the hand-written fixture is compliant and converged", "[check]") {
  // Written as the reference logged before the rule change: eval_samples 256.
  const auto parsed = mllog::parse_log_file(std::string(MLPT_SOURCE_DIR) +
                                            "/tests/fixtures/mllog/closed_gbs512_converged.txt");
  auto merged = check::check_log(parsed);
  require_only(merged, "eval_samples_rules", 14);
  CHECK(merged.checker_compliant());
  auto rep = check::check_log(parsed, {.expected_eval_samples = 256});
  INFO(describe(rep));
  CHECK(rep.compliant());
  CHECK(rep.checker_compliant());
  CHECK(rep.global_batch_size == 512);
  CHECK(rep.target_reached_samples == 6144);
  REQUIRE(rep.time_to_train_minutes);
  // run_start 1764681324783 → run_stop 1764688386692 (lines 36 and 71 of the fixture).
  CHECK(std::fabs(*rep.time_to_train_minutes - (1764688386692.0 - 1764681324783.0) / 60000.0) < 1e-9);
}

TEST_CASE("check log: options from command-line text", "[check]") {
  CHECK(check::parse_check_options("open", std::nullopt).division == Division::open);
  CHECK(check::parse_check_options(std::nullopt, "251").expected_eval_samples == 251);
  CHECK_THROWS_WITH(check::parse_check_options("semi", std::nullopt), Catch::Contains("semi"));
  CHECK_THROWS_WITH(check::parse_check_options(std::nullopt, "25x"), Catch::Contains("25x"));
  CHECK_THROWS(check::parse_check_options(std::nullopt, "0"));
}
