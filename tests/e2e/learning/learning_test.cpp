// The whole benchmark loop, end to end, learning: tiny Qwen3.5 model (random init, 1.6M
// parameters), letters task (reward 1 when the reply starts with a vowel), 4 prompts × 16
// rollouts per step, trainer -> in-process transport -> engine every step, staleness <= 1,
// validation pass@4 from step 15. A randomly initialised policy starts at the share of vowel-initial
// tokens among the first-token choices (about 0.1 here) and must end clearly above it.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <unistd.h>

#include "../learning_curve.hpp"
#include "core/check/log_checker.hpp"
#include "core/mllog/reader.hpp"
#include "core/run/benchmark_run.hpp"

using namespace mlpt;

TEST_CASE("the async GRPO loop raises the reward of the tiny model on the letters task") {
  const std::string cache = MLPT_CACHE_DIR;
  if (!std::filesystem::exists(cache + "/models/tiny/config.json"))
    FAIL("missing " << cache << "/models/tiny: run scripts/prepare-tiny.sh");
  setenv("MLPT_CACHE_DIR", cache.c_str(), 1);
  setenv("MLPT_PLUGIN_PATH", MLPT_PLUGIN_DIR, 1);
  auto config = run::read_run_config(std::string(MLPT_SOURCE_DIR) + "/configs/tiny.toml");
  // Per process: two suites on one machine (two checkouts) must not share a run folder.
  config.run.output_dir = std::filesystem::temp_directory_path() / ("mlpt-learning-test-" + std::to_string(::getpid()));
  std::filesystem::remove_all(config.run.output_dir);
  struct Cleanup {
    std::filesystem::path dir;
    ~Cleanup() { std::error_code ec; std::filesystem::remove_all(dir, ec); }
  } cleanup{config.run.output_dir};

  run::RunOptions options;
  options.progress = [](const std::string& line) { std::fprintf(stderr, "%s\n", line.c_str()); };
  auto s = run::run_benchmark(config, options);
  INFO("abort reason: " << s.abort_reason);
  REQUIRE((s.converged || s.abort_reason == "did not reach the target within max_steps"));

  const auto curve = mlpt_test::read_learning_curve(s.metrics);
  REQUIRE(curve.rewards.size() >= 6);
  WARN("letters task: " << curve.describe(s.converged) << "; best pass@4 " << s.best_pass_at_k);
  CHECK(curve.learned(s.converged));
  for (auto st : curve.staleness) CHECK(st <= config.benchmark.max_trajectory_age_steps);

  // The result log the run wrote is well formed and structurally compliant for the open division.
  auto log = mllog::parse_log_file(s.result_log);
  auto report = check::check_log(log, check::CheckOptions{check::Division::open, std::nullopt});
  INFO(check::format_report(report));
  for (const auto& rule : report.rules)
    if (rule.id != check::kTargetRule || s.converged) CHECK(rule.passed());
}
