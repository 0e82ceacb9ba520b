// A trainer rank that hangs (SIGSTOP, as a wedged GPU or a stuck collective would) stops the run
// within [placement] answer_timeout_s with a message naming the rank; the last checkpoint is whole,
// and `mpirun ... mlpt run --resume DIR` continues from it to the end.
#include <catch2/catch.hpp>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "test_util.hpp"

namespace fs = std::filesystem;

namespace {

std::string read(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

void replace(std::string& text, const std::string& from, const std::string& to) {
  const auto at = text.find(from);
  REQUIRE(at != std::string::npos);
  text.replace(at, from.size(), to);
}

int lines(const fs::path& p) {
  std::ifstream in(p);
  int n = 0;
  for (std::string line; std::getline(in, line);) ++n;
  return n;
}

// The mlpt process of this test's job whose MPI rank (from its environment) is `rank`.
int process_of_rank(int rank) {
  for (const auto& e : fs::directory_iterator("/proc")) {
    const std::string name = e.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    const std::string env = read(e.path() / "environ"), cmd = read(e.path() / "cmdline");
    if (env.find("MLPT_TEST_TAG=trainer-hang") != std::string::npos && cmd.find("bin/mlpt") != std::string::npos &&
        env.find("OMPI_COMM_WORLD_RANK=" + std::to_string(rank) + '\0') != std::string::npos)
      return std::stoi(name);
  }
  return -1;
}

}  // namespace

TEST_CASE("a hung trainer rank stops the run naming it and --resume continues from the last whole checkpoint") {
  const std::string cache = MLPT_CACHE_DIR;
  if (!fs::exists(cache + "/models/tiny/config.json")) FAIL("missing " << cache << "/models/tiny: run scripts/prepare-tiny.sh");
  mlpt_test::TempDir dir("trainer_hang");
  const fs::path out = fs::path(dir.str()) / "run";
  std::string text = read(fs::path(MLPT_SOURCE_DIR) / "configs/tiny-distributed.toml");
  replace(text, "output_dir = \"${MLPT_CACHE_DIR}/runs/tiny-distributed\"", "output_dir = \"" + out.string() + "\"");
  replace(text, "checkpoint_every_steps = 5", "checkpoint_every_steps = 1");
  replace(text, "max_steps = 30", "max_steps = 8");
  replace(text, "first_eval_samples = 960", "first_eval_samples = 64000");
  replace(text, "trainer_ranks = 1", "trainer_ranks = 1\nanswer_timeout_s = 10");
  replace(text, "\"../tasks/", "\"" + std::string(MLPT_SOURCE_DIR) + "/tasks/");
  replace(text, "\"../tasks/", "\"" + std::string(MLPT_SOURCE_DIR) + "/tasks/");
  const fs::path config = fs::path(dir.str()) / "hang.toml";
  std::ofstream(config) << text;
  const std::string launch = "MLPT_TEST_TAG=trainer-hang MLPT_CACHE_DIR=" + cache + " MLPT_PLUGIN_PATH=" + MLPT_PLUGIN_DIR +
                             " timeout -k 10 600 " + MPIRUN_EXE + " --allow-run-as-root --oversubscribe --bind-to none -x MLPT_TEST_TAG -np 4 " +
                             MLPT_BUILD_DIR + "/bin/mlpt run ";

  // Stop the trainer rank once the step-2 checkpoint is in place.
  int stopped = -1;
  std::atomic<bool> ended{false};
  std::thread hang([&] {
    const fs::path step_2 = out / "checkpoints" / "step_2" / "loop_state.json";  // renamed into place whole
    for (int i = 0; i < 1200 && !ended && !fs::exists(step_2); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(250));
    if (ended) return;
    stopped = process_of_rank(1);
    if (stopped > 0) ::kill(stopped, SIGSTOP);
  });
  int status = 0;
  const auto started = std::chrono::steady_clock::now();
  const std::string first = mlpt_test::run_command(launch + config.string() + " 2>&1", &status);
  ended = true;
  hang.join();
  INFO(first);
  REQUIRE(stopped > 0);
  CHECK(WEXITSTATUS(status) == 3);
  CHECK_THAT(first, Catch::Contains("trainer rank 0 (rank 1) did not answer") && Catch::Contains("answer_timeout_s"));
  CHECK(std::chrono::steady_clock::now() - started < std::chrono::minutes(5));

  // The last checkpoint is whole (a save the hang interrupted stays a .partial folder that resume
  // never trusts): its loop state and the trainer's state.
  int last = 0;
  for (const auto& e : fs::directory_iterator(out / "checkpoints")) {
    const std::string name = e.path().filename();
    if (name.rfind("step_", 0) == 0 && name.find(".partial") == std::string::npos) last = std::max(last, std::stoi(name.substr(5)));
  }
  REQUIRE(last >= 2);
  const fs::path checkpoint = out / "checkpoints" / ("step_" + std::to_string(last));
  CHECK(fs::exists(checkpoint / "loop_state.json"));
  CHECK(!fs::is_empty(checkpoint / "trainer"));

  const std::string second = mlpt_test::run_command(launch + "--resume " + out.string() + " 2>&1", &status);
  INFO(second);
  CHECK((WEXITSTATUS(status) == 0 || WEXITSTATUS(status) == 1));
  CHECK_THAT(second, Catch::Contains("resumed from the step-" + std::to_string(last) + " checkpoint"));
  CHECK(lines(out / "metrics.jsonl") == 8);
}
