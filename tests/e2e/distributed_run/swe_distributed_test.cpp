// The main job with two rollout workers (configs/swe-tiny-distributed.toml under mpirun -np 4):
// each worker runs its episodes with its own engine and its own sandboxes (the OpenHands agent's
// and the R2E grader's), and the coordinator trains on both workers' trajectories. Two steps and
// one validation task, to stay short.
#include <catch2/catch.hpp>

#include <map>
#include <sstream>

#include <nlohmann/json.hpp>

#include "distributed_support.hpp"

namespace fs = std::filesystem;
using namespace dist_run_test;

TEST_CASE("the SWE main job with two rollout workers, each with its own sandboxes, under mpirun -np 4") {
  require_tiny_model();
  if (!fs::exists(std::string(MLPT_CACHE_DIR) + "/images")) FAIL("missing " << MLPT_CACHE_DIR << "/images: run scripts/build-task-images.sh");
  mlpt_test::TempDir dir("swe_distributed");
  const fs::path out = fs::path(dir.str()) / "run", config = fs::path(dir.str()) / "swe.toml";
  write_config(fs::path(MLPT_SOURCE_DIR) / "configs/swe-tiny-distributed.toml", config, out,
               "${MLPT_CACHE_DIR}/runs/swe-tiny-distributed",
               {{"chat_format = \"qwen3\"", "chat_format = \"qwen3\"\nvalidation_tasks = 1"}});
  int status = 0;
  const std::string output =
      mlpt_test::run_command(launch("swe-distributed", 900, false) + config.string() + " 2>&1", &status);
  INFO(output);
  // 1: not converged within max_steps (the random tiny model solves nothing); a finished run.
  REQUIRE((WEXITSTATUS(status) == 0 || WEXITSTATUS(status) == 1));
  CHECK(lines(out / "metrics.jsonl") == 2);

  // Every training rollout says which worker ran it; both ran some, graded in their own sandboxes.
  std::map<std::string, int> by_worker, graded;
  std::istringstream records(
      mlpt_test::run_command("gzip -dc " + (out / "rollouts.jsonl.gz").string(), &status));
  for (std::string line; std::getline(records, line);) {
    auto r = nlohmann::json::parse(line);
    if (r.value("kind", "") != "train") continue;
    const std::string worker = r.value("rollout_worker", "");
    ++by_worker[worker];
    if (!r["reward"]["details"].is_null() && !r["reward"]["details"].empty()) ++graded[worker];
  }
  INFO("rollouts by worker: " << nlohmann::json(by_worker).dump()
                              << ", graded: " << nlohmann::json(graded).dump());
  CHECK(by_worker.size() == 2);
  CHECK(by_worker["rollout worker 0 (rank 2)"] > 0);
  CHECK(by_worker["rollout worker 1 (rank 3)"] > 0);
  CHECK(graded["rollout worker 0 (rank 2)"] > 0);
  CHECK(graded["rollout worker 1 (rank 3)"] > 0);
  CHECK_THAT(output, Catch::Contains("(0 failed, back-filled with reward 0)"));

  check_result_log(out / "result.txt", false);
}
