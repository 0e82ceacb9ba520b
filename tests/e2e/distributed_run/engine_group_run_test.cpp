// `mlpt run` whose rollout worker is an engine group (configs/tiny-engine-group.toml: coordinator,
// one trainer rank, one rollout worker of two engine ranks, [placement] engine_ranks = 2). The
// worker's group rank 0 runs the episodes; rank 1 computes every step with it from inside the
// reference engine and fetches its own shards of every version from the transport. The TP=2 and
// EP=2 groups must learn the letters task by the learning runs' one criterion (learning_curve.hpp)
// and their logs must pass `mlpt check log`. Placements the run cannot take are refused before it
// writes anything, naming the config and its keys. kill -9 of the engine rank loses the worker
// (the only one: the run fails naming the rank) and nothing hangs.
#include <catch2/catch.hpp>

#include <chrono>

#include "distributed_support.hpp"

namespace fs = std::filesystem;
using namespace dist_run_test;

namespace {

void write_engine_group_config(const fs::path& file, const fs::path& out, const std::vector<std::pair<std::string, std::string>>& edits) {
  write_config(fs::path(MLPT_SOURCE_DIR) / "configs/tiny-engine-group.toml", file, out, "${MLPT_CACHE_DIR}/runs/tiny-engine-group",
               edits);
}

}  // namespace

TEST_CASE("mpirun -np 4 mlpt run: a rollout worker that is a TP=2 or EP=2 engine group learns the letters task") {
  require_tiny_model();
  const bool tensor_parallel = GENERATE(true, false);
  const std::string layout = tensor_parallel ? "engine-tensor-parallel" : "engine-expert-parallel";
  INFO(layout);
  mlpt_test::TempDir dir(layout.c_str());
  const fs::path out = fs::path(dir.str()) / "run", config = fs::path(dir.str()) / (layout + ".toml");
  write_engine_group_config(config, out, tensor_parallel ? std::vector<std::pair<std::string, std::string>>{}
                                                         : std::vector<std::pair<std::string, std::string>>{
                                                               {"tensor_parallel = ", "expert_parallel = 2"}});
  const bool converged = check_letters_run(layout, config, out);
  std::ifstream metrics(out / "metrics.jsonl");
  for (std::string line; std::getline(metrics, line);) {
    const auto row = nlohmann::json::parse(line);
    INFO("step " << row["step"] << ": " << row.dump());
    CHECK(row["failed_rollouts"] == 0);
    CHECK(row["lost_rollout_workers"] == 0);
  }
  check_result_log(out / "result.txt", converged);
}

TEST_CASE("mlpt run refuses an engine group the placement or the engine's settings cannot take, before writing anything") {
  check_refusals("engine-group-refused", {
      {"two trainer ranks leave one rank, not a worker of two",
       {{"trainer_ranks = ", "trainer_ranks = 2"}},
       {"[placement] trainer_ranks = 2", "engine_ranks = 2", "start 5 or more"}},
      {"an engine group of two ranks whose engine is not split",
       {{"tensor_parallel = ", ""}},
       {"[components.engine]", "[placement] engine_ranks = 2", "tensor_parallel 1", "group of 1 ranks"}},
      {"a split engine on workers of one rank",
       {{"engine_ranks = ", "engine_ranks = 1"}},
       {"[components.engine]", "[placement] engine_ranks = 1", "tensor_parallel 2", "group of 2 ranks"}},
  }, write_engine_group_config);
}

TEST_CASE("kill -9 of a rollout worker's engine rank: the worker is lost with it, the run ends naming the rank, nothing hangs") {
  require_tiny_model();
  mlpt_test::TempDir dir("engine_rank_loss");
  const fs::path out = fs::path(dir.str()) / "run", config = fs::path(dir.str()) / "engine-rank-loss.toml";
  write_engine_group_config(config, out,
                            {{"max_steps = ", "max_steps = 8"},
                             {"checkpoint_every_steps = ", "checkpoint_every_steps = 0"},
                             {"engine_ranks = ", "engine_ranks = 2\nheartbeat_timeout_s = 5"}});
  // Engine rank 1 of the worker (rank 3) dies once two steps are recorded: rank 2 is then held in
  // the group's collectives, waiting for it.
  // 600 s bounds a hang; the run itself ends within seconds of the heartbeat timeout.
  const SignalledRun run =
      run_signalling_rank(launch("engine-rank-loss", 600, true) + config.string() + " 2>&1", "engine-rank-loss", 3, SIGKILL,
                          [&] { return lines(out / "metrics.jsonl") >= 2; }, 240);
  const std::string& output = run.output;
  const int status = run.status;
  const double seconds = run.seconds;
  INFO(output);
  REQUIRE(run.signalled > 0);
  CHECK(WEXITSTATUS(status) == 0);  // mpirun --enable-recovery: not the timeout's 124
  CHECK_THAT(output, Catch::Contains("rollout worker 0, engine rank 1 (rank 3): no heartbeat for 5 s"));
  CHECK_THAT(output, Catch::Contains("every rollout worker is lost"));
  CHECK_THAT(output, Catch::Contains("rollout worker 0 (rank 2): the coordinator dropped this rollout worker; leaving at once"));
  CHECK_THAT(output, Catch::Contains("exit status 3"));
  WARN("the run ended " << seconds << " s after it started, the engine rank killed after step 2");
  CHECK(lines(out / "metrics.jsonl") >= 2);
}
