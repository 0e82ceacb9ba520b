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

// Engine rank 1 throws instead of making its n-th collective of the model (the test-only engine
// settings test_only_fail_at_collective and test_only_fail_rank), halfway through a generation
// step, after some whole steps with a checkpoint each. Rank 0 of the group, waiting for it in that
// collective, gives up; the worker's episodes (or its next weight fetch) fail naming rank 1 and the
// run stops: no rank hangs, the status is not 0, and what the run wrote before (result log,
// metrics, every whole checkpoint) is intact, so `--resume` without the fault continues from the
// last checkpoint to the end.
TEST_CASE("an engine rank that fails mid-step inside mlpt run ends the run naming it, with what it wrote intact and resumable") {
  require_tiny_model();
  mlpt_test::TempDir dir("engine_rank_fault");
  const fs::path out = fs::path(dir.str()) / "run", config = fs::path(dir.str()) / "engine-rank-fault.toml";
  constexpr int kSteps = 6;
  // Engine rank 1 makes some 200 to 250 collectives a step here (expert columns split over the two
  // TP ranks, expert_tensor_parallel 2; whole experts dispatched over both make more): it fails in
  // step 2 to 4 (batching varies).
  constexpr int kFailAt = 700;
  write_engine_group_config(config, out,
                            {{"max_steps = ", "max_steps = " + std::to_string(kSteps)},
                             {"checkpoint_every_steps = ", "checkpoint_every_steps = 1"},
                             {"first_eval_samples = ", "first_eval_samples = 64000"},
                             {"tensor_parallel = 2", "tensor_parallel = 2\nexpert_tensor_parallel = 2\ntest_only_fail_at_collective = " +
                                                         std::to_string(kFailAt) + "\ntest_only_fail_rank = 1"}});
  const auto started = std::chrono::steady_clock::now();
  int status = 0;
  const std::string output = mlpt_test::run_command(launch("engine-rank-fault", 300, false) + config.string() + " 2>&1", &status);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  INFO(output);
  CHECK(WEXITSTATUS(status) == 3);  // the run failed (the coordinator's MPI_Abort), not the timeout's 124
  CHECK_THAT(output, Catch::Contains("engine group 'mlpt-run-") && Catch::Contains("rank 1 failed (test-only fault"));
  // Which of the group's calls meets the failure first is a race: a generation step (its episodes
  // fail until the failure rate is exceeded) or the step's weight fetch (the worker is dropped).
  CHECK_THAT(output, Catch::Contains("rollouts failed, more than max_rollout_failure_rate") ||
                         Catch::Contains("every rollout worker is lost"));
  const int steps = lines(out / "metrics.jsonl");
  WARN("engine rank 1 failed at its collective " << kFailAt << ", after " << steps << " step(s); the run ended " << seconds
                                                   << " s after it started");
  REQUIRE(steps >= 1);
  REQUIRE(steps < kSteps);

  // The result log is closed and whole; every checkpoint is whole and holds its steps.
  std::ifstream log(out / "result.txt");
  nlohmann::json last;
  for (std::string line; std::getline(log, line);) {
    REQUIRE(line.rfind(":::MLLOG ", 0) == 0);
    last = nlohmann::json::parse(line.substr(9));
  }
  CHECK(last["key"] == "run_stop");
  CHECK(last["metadata"]["status"] == "aborted");
  const int checkpoint = last_checkpoint(out);
  REQUIRE(checkpoint >= 1);
  for (int step = 1; step <= checkpoint; ++step) {
    const fs::path saved = out / "checkpoints" / ("step_" + std::to_string(step));
    INFO(saved);
    const nlohmann::json loop = nlohmann::json::parse(read(saved / "loop_state.json"));
    CHECK(loop["step"] == step);
    CHECK(fs::exists(saved / "trainer/trainer_state.json"));
  }
  CHECK(mlpt_test::run_command("gzip -t " + (out / "rollouts.jsonl.gz").string() + " 2>&1", &status).empty());
  CHECK(status == 0);

  // Without the fault (a test-only setting a resume may drop), the run continues from there.
  std::string text = read(config);
  const std::string fault = "test_only_fail_at_collective = " + std::to_string(kFailAt);
  text.replace(text.find(fault), fault.size(), "");
  std::ofstream(config, std::ios::trunc) << text;
  const std::string resumed = mlpt_test::run_command(launch("engine-rank-fault", 300, false) + "--resume " + out.string() + " 2>&1", &status);
  INFO(resumed);
  CHECK((WEXITSTATUS(status) == 0 || WEXITSTATUS(status) == 1));
  CHECK_THAT(resumed, Catch::Contains("resumed from the step-" + std::to_string(checkpoint) + " checkpoint"));
  CHECK(lines(out / "metrics.jsonl") == kSteps);
}
