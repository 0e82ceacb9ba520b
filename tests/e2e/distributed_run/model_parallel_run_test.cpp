// `mlpt run` with a model-parallel trainer (configs/tiny-tensor-parallel.toml and its expert-parallel
// variant: the coordinator, two trainer ranks that each hold a part of the tiny model, one rollout
// worker). The ranks of a replica train the same batch share (the trainer says which replica each
// rank is, trainer.h out_data_parallel_rank) and replica 0's ranks each publish their own shards to
// the engine through their own sender rank of the UCX transport (under TP several boxes of one
// fused tensor per rank). The TP=2 and EP=2 runs must learn the letters task by the learning runs'
// one criterion (learning_curve.hpp) and their logs must pass `mlpt check log`; EP2 x DP2 must split
// the batch between its replicas. Layouts the run cannot take are refused before it writes
// anything, naming the config and its keys.
#include <catch2/catch.hpp>

#include <cmath>

#include "distributed_support.hpp"

namespace fs = std::filesystem;
using namespace dist_run_test;

TEST_CASE("mpirun -np 4 mlpt run: a TP=2 or EP=2 trainer learns the letters task, each rank publishing its shards") {
  require_tiny_model();
  const bool tensor_parallel = GENERATE(true, false);
  const std::string layout = tensor_parallel ? "tensor-parallel" : "expert-parallel";
  INFO(layout);
  mlpt_test::TempDir dir(tensor_parallel ? "tensor_parallel_run" : "expert_parallel_run");
  const fs::path out = fs::path(dir.str()) / "run", config = fs::path(dir.str()) / (layout + ".toml");
  if (tensor_parallel)
    write_tensor_parallel_config(config, out, {});
  else
    write_tensor_parallel_config(config, out, {{"tensor_parallel = ", "expert_parallel = 2"}});
  const bool converged = check_letters_run(layout, config, out);

  // Every refit was dense and carried both ranks' shards: at least the whole model's tensor bytes
  // (the checkpoint less its header, under 64 KiB), which one rank alone (half of each split
  // matrix) does not hold.
  const auto model_bytes = static_cast<int64_t>(fs::file_size(fs::path(MLPT_CACHE_DIR) / "models/tiny/model.safetensors")) - 65536;
  std::ifstream metrics(out / "metrics.jsonl");
  for (std::string line; std::getline(metrics, line);) {
    const auto row = nlohmann::json::parse(line);
    INFO("step " << row["step"] << ": " << row["refit"].dump());
    CHECK(row["refit"]["mode"] == "dense");
    CHECK(row["refit"]["bytes"].get<int64_t>() >= model_bytes);
    CHECK(row["trainer"]["sequences"].get<double>() == row["sequences"].get<double>());  // one replica: the whole batch
    CHECK(row["failed_rollouts"] == 0);
  }
  check_result_log(out / "result.txt", converged);
  CHECK(last_checkpoint(out) >= 5);  // the sharded trainer saved (checkpoint_every_steps = 5)
}

TEST_CASE("mpirun -np 6 mlpt run: an EP2 x DP2 trainer trains two batch shares, each on its two expert-parallel ranks") {
  require_tiny_model();
  mlpt_test::TempDir dir("ep2_dp2_run");
  const fs::path out = fs::path(dir.str()) / "run", config = fs::path(dir.str()) / "ep2-dp2.toml";
  // Four trainer ranks: replicas 0 (ranks 0, 1) and 1 (ranks 2, 3) train different shares, and a
  // rank of a replica given the other's share would refuse the step. Three steps, no validation.
  write_tensor_parallel_config(config, out,
                               {{"tensor_parallel = ", "expert_parallel = 2"},
                                {"trainer_ranks = ", "trainer_ranks = 4"},
                                {"max_steps = ", "max_steps = 3"},
                                {"first_eval_samples = ", "first_eval_samples = 64000"},
                                {"checkpoint_every_steps = ", "checkpoint_every_steps = 0"}});
  const std::string command = "MLPT_CACHE_DIR=" + std::string(MLPT_CACHE_DIR) + " MLPT_PLUGIN_PATH=" + MLPT_PLUGIN_DIR +
                              " timeout -k 10 900 " + mlpt_test::mpirun_command(6) + MLPT_BUILD_DIR + "/bin/mlpt run ";
  int status = 0;
  const std::string output = mlpt_test::run_command(command + config.string() + " 2>&1", &status);
  INFO(output);
  REQUIRE((WEXITSTATUS(status) == 0 || WEXITSTATUS(status) == 1));
  const auto model_bytes = static_cast<int64_t>(fs::file_size(fs::path(MLPT_CACHE_DIR) / "models/tiny/model.safetensors")) - 65536;
  std::ifstream metrics(out / "metrics.jsonl");
  int steps = 0;
  for (std::string line; std::getline(metrics, line); ++steps) {
    const auto row = nlohmann::json::parse(line);
    INFO("step " << row["step"] << ": " << row.dump());
    CHECK(row["refit"]["bytes"].get<int64_t>() >= model_bytes);  // replica 0's two ranks: the whole model
    CHECK(std::isfinite(row["trainer"]["loss"].get<double>()));
    // The replicas' sequence counts add up to the batch: each share was trained by one replica.
    CHECK(row["trainer"]["sequences"].get<double>() == row["sequences"].get<double>());
    CHECK(row["failed_rollouts"] == 0);
  }
  CHECK(steps == 3);
}

TEST_CASE("mlpt run refuses a model-parallel trainer the placement or the refit cannot take, before writing anything") {
  check_refusals("tensor-parallel-refused", {
      {"two trainer ranks cannot hold tensor_parallel 2 x expert_parallel 2",
       {{"tensor_parallel = ", "tensor_parallel = 2\nexpert_parallel = 2"}},
       {"[placement] trainer_ranks", "tensor_parallel 2", "expert_parallel 2"}},
      {"a sparse refit relays one rank's export, which holds half the model",
       {{"checkpoint_every_steps = ", "checkpoint_every_steps = 0\nrefit = \"sparse\""}},
       {"[run] refit = \"sparse\"", "refit = \"dense\""}},
  }, write_tensor_parallel_config);
}
