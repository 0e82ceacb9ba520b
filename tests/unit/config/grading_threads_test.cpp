// [run] grading_threads: how many rollouts are graded at once (each a hidden-test run), read from
// the config, refused outside 0..rollout_workers with the key named, and the size of the grading
// pool every rollout pool of the run gets.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <string>

#include "core/run/rollout_threads.hpp"
#include "core/run/run_config.hpp"

using namespace mlpt;

namespace {

// A run config whose [run] table holds `run_lines`.
run::RunConfig read_with(const std::string& run_lines) {
  const auto path = std::filesystem::temp_directory_path() /
                    ("mlpt_grading_threads." + std::to_string(::getpid()) + ".toml");
  std::ofstream(path)
      << "[run]\nname = \"t\"\noutput_dir = \"/tmp/mlpt-grading-threads-out\"\nseed = 1\n"
      << run_lines
      << "\n[benchmark]\nnum_prompts_per_step = 2\n[dataset]\ntrain = \"" MLPT_SOURCE_DIR
         "/tasks/letters/train.jsonl\"\nvalidation = \"" MLPT_SOURCE_DIR
         "/tasks/letters/validation.jsonl\"\ntokenizer = \"/nonexistent/tokenizer.json\"\n"
         "[components.trainer]\nplugin = \"x.so\"\n[components.engine]\nplugin = \"x.so\"\n"
         "[components.transport]\nplugin = \"x.so\"\n[components.harness]\nplugin = \"x.so\"\n"
         "[components.reward]\nplugin = \"x.so\"\n";
  auto config = run::read_run_config(path);
  std::filesystem::remove(path);
  return config;
}

}  // namespace

TEST_CASE("grading_threads sizes the grading pool of a run's rollout pool, and 0 takes rollout_threads") {
  const auto set = read_with("rollout_workers = 12\nrollout_threads = 4\ngrading_threads = 3");
  CHECK(set.run.grading_threads == 3);
  const rollout::EpisodeEnvironment env{};  // no episode runs: only the pool's threads are looked at
  auto pool = run::make_rollout_pool(set.run, env);
  CHECK(pool->threads() == 4);
  CHECK(pool->grading_threads() == 3);

  const auto unset = read_with("rollout_workers = 12\nrollout_threads = 5");
  CHECK(unset.run.grading_threads == 0);
  CHECK(run::make_rollout_pool(unset.run, env)->grading_threads() == 5);

  // rollout_threads past rollout_workers would only wait: the pool takes rollout_workers.
  const auto few = read_with("rollout_workers = 2\nrollout_threads = 8\ngrading_threads = 2");
  auto small = run::make_rollout_pool(few.run, env);
  CHECK(small->threads() == 2);
  CHECK(small->grading_threads() == 2);
}

TEST_CASE("grading_threads below 0 or above rollout_workers is refused naming the key and the bound") {
  CHECK_THROWS_WITH(read_with("rollout_workers = 4\ngrading_threads = -1"),
                    Catch::Contains("'run.grading_threads'") && Catch::Contains("0..rollout_workers (4)"));
  CHECK_THROWS_WITH(read_with("rollout_workers = 4\ngrading_threads = 5"),
                    Catch::Contains("'run.grading_threads'") && Catch::Contains("0..rollout_workers (4)"));
  CHECK_THROWS_WITH(read_with("grading_threads = \"two\""), Catch::Contains("grading_threads"));
  CHECK_NOTHROW(read_with("rollout_workers = 4\ngrading_threads = 4"));
}
