// Every rank of a distributed run keeps its own flight recorder and writes it into the run
// folder's flight_recorder/rank-N/: on SIGUSR1 (what mpirun passes on to every rank when a person
// signals it) and when one of its plugin calls runs past [run] hang_dump_after_s, naming the call.
#include <catch2/catch.hpp>
#include <csignal>
#include <nlohmann/json.hpp>

#include "distributed_support.hpp"

namespace fs = std::filesystem;
using namespace dist_run_test;
using nlohmann::json;

namespace {

// The dumps in `folder` whose file name holds `why`, parsed.
std::vector<json> dumps(const fs::path& folder, const std::string& why) {
  std::vector<json> out;
  if (!fs::exists(folder)) return out;
  for (const auto& entry : fs::directory_iterator(folder))
    if (entry.path().filename().string().find(why) != std::string::npos)
      out.push_back(json::parse(read(entry.path())));
  return out;
}

bool holds_call(const json& dump, const std::string& kind) {
  for (const auto& ring : dump["recent"])
    if (ring["kind"] == kind && !ring["calls"].empty()) return true;
  return false;
}

}  // namespace

TEST_CASE(
    "each rank of mpirun -np 4 mlpt run dumps its own plugin calls into flight_recorder/rank-N on SIGUSR1 "
    "and on a hung call") {
  require_tiny_model();
  mlpt_test::TempDir dir("rank_dumps");
  const fs::path out = fs::path(dir.str()) / "run";
  const fs::path config = fs::path(dir.str()) / "rank-dumps.toml";
  // A threshold every train step passes: each rank's slowest calls are reported as hung.
  write_tiny_config(config, out,
                    {{"checkpoint_every_steps = ", "checkpoint_every_steps = 1\nhang_dump_after_s = 0.05"},
                     {"max_steps = ", "max_steps = 30"},
                     {"first_eval_samples = ", "first_eval_samples = 64000"}});
  const fs::path step_2 = out / "checkpoints" / "step_2" / "loop_state.json";
  const SignalledRun run = run_signalling_rank(launch("rank-dumps", 600, false) + config.string() + " 2>&1",
                                               "rank-dumps", 1, SIGUSR1, [&] { return fs::exists(step_2); });
  INFO(run.output);
  REQUIRE(run.signalled > 0);
  CHECK((WEXITSTATUS(run.status) == 0 || WEXITSTATUS(run.status) == 1));  // a dump stops nothing

  const std::vector<json> live = dumps(out / "flight_recorder" / "rank-1", "SIGUSR1");
  REQUIRE(live.size() == 1);
  CHECK(live[0]["rank"] == 1);
  CHECK(live[0]["pid"] == run.signalled);
  CHECK(holds_call(live[0], "trainer"));
  CHECK_THAT(run.output,
             Catch::Contains("trainer rank 0 (rank 1): SIGUSR1: the last calls into its plugins are in " +
                             (out / "flight_recorder" / "rank-1").string()));

  // Hung calls, named on stderr and dumped, on the trainer rank and on each rollout worker.
  for (int rank : {1, 2, 3}) {
    const std::vector<json> hung = dumps(out / "flight_recorder" / ("rank-" + std::to_string(rank)), "hang");
    INFO("rank " << rank);
    REQUIRE_FALSE(hung.empty());
    CHECK(hung[0]["rank"] == rank);
    CHECK_THAT(hung[0]["reason"].get<std::string>(), Catch::Contains("has not returned after"));
    CHECK_FALSE(hung[0]["running"].empty());
  }
  CHECK_THAT(run.output, Catch::Contains("(rank 1): trainer 'qwen35_cpu' call") &&
                             Catch::Contains("has not returned after"));
  // The coordinator's own dumps stay in flight_recorder/ itself, each saying rank 0.
  for (const json& own : dumps(out / "flight_recorder", "dump-")) CHECK(own["rank"] == 0);
}
