// What the engine-group tests share (the CPU ones in distributed_test.cpp, the CUDA one in
// tests/reference_cuda/backends/cuda): two checkpoints and the script dist_peer's engine mode runs, and
// running an engine (group) under mpirun, reading back what each rank reported.
#pragma once

#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "mpirun.hpp"
#include "tests/support/test_util.hpp"

namespace dist_test {

using nlohmann::json;
using mlpt_test::TempDir;

// The requests of the CPU groups' script: five at once (greedy, seeded, two sharing a prompt: the
// prefix cache copies a state; one opening session 7) and the session's second turn.
inline json mixed_requests() {
  const std::vector<int32_t> shared{4, 9, 16, 25, 36, 12, 3, 8, 1, 30, 22};
  return {{"requests",
           {{{"name", "greedy"}, {"id", 1}, {"tokens", {1, 2, 3, 4, 5, 6, 7}}, {"top_k", 1}, {"max_new_tokens", 8}},
            {{"name", "seeded"}, {"id", 2}, {"tokens", {30, 2, 17, 5}}, {"seed", 11}, {"max_new_tokens", 8}},
            {{"name", "shared_a"}, {"id", 3}, {"tokens", shared}, {"seed", 5}},
            {{"name", "shared_b"}, {"id", 4}, {"tokens", shared}, {"seed", 6}},
            {{"name", "session"}, {"id", 5}, {"session", 7}, {"tokens", {11, 13, 17, 19, 23}}, {"seed", 9}, {"max_new_tokens", 5}}}},
          {"second_turn", {{"of", "session"}, {"id", 6}, {"extra", {3, 5, 7}}, {"max_new_tokens", 5}}}};
}

// Two checkpoints of `config` (the engines start from A, DIR/a; the refit brings B, DIR/b) and the
// script (DIR/script.json): `requests` (as mixed_requests), the same after the refit to B, and again
// after a load of A's whole tensors. Returns A's directory.
inline std::string engine_checkpoints(const TempDir& dir, const json& config, const json& requests = mixed_requests()) {
  const std::string file = dir / "ck.config.json";
  mlpt_test::write_bytes(file, config.dump());
  for (auto [name, seed] : {std::pair{"a", 31}, std::pair{"b", 32}}) {
    int status = 0;
    const std::string log = mlpt_test::run_command(std::string(MLPT_BUILD_DIR) + "/bin/mlpt-model init --config " + file +
                                                       " --seed " + std::to_string(seed) + " --out " + dir / name + " 2>&1",
                                                   &status);
    INFO(log);
    REQUIRE(status == 0);
  }
  json script = requests;
  script["transport_plugin"] = std::string(MLPT_PLUGIN_DIR) + "/libmlpt_transport_inprocess.so";
  script["checkpoint_b"] = dir / "b";
  mlpt_test::write_bytes(dir / "script.json", script.dump());
  return dir / "a";
}

// dist_peer's engine mode on `ranks` ranks (one: an engine alone) of the plugin's engine component
// `engine`: every rank's report (DIR/OUT/rank<r>.json).
inline json run_engines(const TempDir& dir, int ranks, const json& settings, const std::string& out,
                        const std::string& engine = "qwen35_cpu") {
  std::filesystem::create_directories(dir / out);
  auto run = mpirun(ranks, "env MLPT_TEST_ENGINE=" + engine + " " + std::string(DIST_PEER_EXE) + " engine " + MLPT_PLUGIN_DIR +
                               "/libmlpt_reference.so '" + settings.dump() + "' " + dir / "script.json" + " " + dir / out);
  INFO(run.output);
  REQUIRE(run.status == 0);
  json reports = json::array();
  for (int rank = 0; rank < ranks; ++rank) {
    std::ifstream in(dir / (out + "/rank" + std::to_string(rank) + ".json"));
    REQUIRE(in.good());
    reports.push_back(json::parse(in));
  }
  return reports;
}

}  // namespace dist_test
