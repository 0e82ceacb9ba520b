// What the distributed-run tests share: a copy of a bundled config with edits, the mpirun line that
// starts it, the mlpt process that is one rank of a tagged job (to kill or stop it, once the run
// reaches a point), the checkpoints a run left, and the check of its result log.
#pragma once

#include <catch2/catch.hpp>

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <functional>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "../learning_curve.hpp"
#include "mpirun_command.hpp"  // tests/support
#include "tests/support/test_util.hpp"

namespace dist_run_test {

namespace fs = std::filesystem;

inline std::string read(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

inline int lines(const fs::path& p) {
  std::ifstream in(p);
  int n = 0;
  for (std::string line; std::getline(in, line);) ++n;
  return n;
}

// The config `source` written to `file` with its output_dir (`output_dir` in it) set to `out`, its
// data paths ("../tasks/") absolute, and each {from, to} edit applied (each `from` must be in it);
// a `from` that ends in "= " ("max_steps = ") stands for the rest of its line too, whatever value
// the bundled config has.
inline void write_config(const fs::path& source, const fs::path& file, const fs::path& out,
                         const std::string& output_dir,
                         const std::vector<std::pair<std::string, std::string>>& edits) {
  std::string text = read(source);
  auto replace = [&](const std::string& from, const std::string& to) {
    const auto at = text.find(from);
    REQUIRE(at != std::string::npos);
    const bool whole_line = from.size() >= 2 && from.compare(from.size() - 2, 2, "= ") == 0;
    text.replace(at, whole_line ? text.find('\n', at) - at : from.size(), to);
  };
  replace("output_dir = \"" + output_dir + "\"", "output_dir = \"" + out.string() + "\"");
  for (int i = 0; i < 2; ++i) replace("\"../tasks/", "\"" + std::string(MLPT_SOURCE_DIR) + "/tasks/");
  for (const auto& [from, to] : edits) replace(from, to);
  std::ofstream(file) << text;
}

// configs/tiny-distributed.toml so.
inline void write_tiny_config(const fs::path& file, const fs::path& out,
                              const std::vector<std::pair<std::string, std::string>>& edits) {
  write_config(fs::path(MLPT_SOURCE_DIR) / "configs/tiny-distributed.toml", file, out,
               "${MLPT_CACHE_DIR}/runs/tiny-distributed", edits);
}

// configs/tiny-tensor-parallel.toml so.
inline void write_tensor_parallel_config(const fs::path& file, const fs::path& out,
                                         const std::vector<std::pair<std::string, std::string>>& edits) {
  write_config(fs::path(MLPT_SOURCE_DIR) / "configs/tiny-tensor-parallel.toml", file, out,
               "${MLPT_CACHE_DIR}/runs/tiny-tensor-parallel", edits);
}

// The mark a job tagged `tag` carries: the tag and this test process's pid, so that a signal meant
// for this job's rank never reaches a job another copy of the test started with the same tag.
inline std::string job_mark(const std::string& tag) { return tag + "-" + std::to_string(::getpid()); }

// `mlpt run ` under mpirun with four ranks, bounded by `timeout_s`; MLPT_TEST_TAG marks the job's
// processes for process_of_rank.
inline std::string launch(const std::string& tag, int timeout_s, bool recovery) {
  mlpt_test::MpirunOptions options{recovery, {"MLPT_TEST_TAG"}};
  return "MLPT_TEST_TAG=" + job_mark(tag) + " MLPT_CACHE_DIR=" + MLPT_CACHE_DIR +
         " MLPT_PLUGIN_PATH=" + MLPT_PLUGIN_DIR + " timeout -k 10 " + std::to_string(timeout_s) + " " +
         mlpt_test::mpirun_command(4, options) + MLPT_BUILD_DIR + "/bin/mlpt run ";
}

// The mlpt process of the job tagged `tag` whose MPI rank (from its environment) is `rank`; -1 if none.
inline int process_of_rank(const std::string& tag, int rank) {
  for (const auto& e : fs::directory_iterator("/proc")) {
    const std::string name = e.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    const std::string env = read(e.path() / "environ"), cmd = read(e.path() / "cmdline");
    if (env.find("MLPT_TEST_TAG=" + job_mark(tag) + '\0') != std::string::npos &&
        cmd.find("bin/mlpt") != std::string::npos &&
        env.find("OMPI_COMM_WORLD_RANK=" + std::to_string(rank) + '\0') != std::string::npos)
      return std::stoi(name);
  }
  return -1;
}

// A command (a job tagged `tag`) during which rank `rank` of the job is sent `signal` once
// `reached()` holds (polled every 50 ms, for at most `wait_s`; never reached: no signal).
struct SignalledRun {
  std::string output;
  int status = 0;
  int signalled = -1;  // the process signalled; -1 if none was (the run ended first, or no such rank)
  double seconds = 0;  // the command's wall time
};
inline SignalledRun run_signalling_rank(const std::string& command, const std::string& tag, int rank, int signal,
                                        const std::function<bool()>& reached, int wait_s = 300) {
  SignalledRun r;
  std::atomic<bool> ended{false};
  std::thread signaller([&] {
    for (int i = 0; i < wait_s * 20 && !ended && !reached(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (ended || !reached()) return;  // never at the point: no signal, and the test says so
    r.signalled = process_of_rank(tag, rank);
    if (r.signalled > 0) ::kill(r.signalled, signal);
  });
  const auto started = std::chrono::steady_clock::now();
  r.output = mlpt_test::run_command(command, &r.status);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  ended = true;
  signaller.join();
  return r;
}

// The newest whole checkpoint's step in `out`/checkpoints (a save that was cut short stays a
// .partial folder, which resume never trusts); 0 when there is none.
inline int last_checkpoint(const fs::path& out) {
  int last = 0;
  if (!fs::exists(out / "checkpoints")) return 0;
  for (const auto& e : fs::directory_iterator(out / "checkpoints")) {
    const std::string name = e.path().filename();
    if (name.rfind("step_", 0) == 0 && name.find(".partial") == std::string::npos)
      last = std::max(last, std::stoi(name.substr(5)));
  }
  return last;
}

// The tiny model the letters runs need (scripts/prepare-tiny.sh), or the test fails saying so.
inline void require_tiny_model() {
  const std::string cache = MLPT_CACHE_DIR;
  if (!fs::exists(cache + "/models/tiny/config.json")) FAIL("missing " << cache << "/models/tiny: run scripts/prepare-tiny.sh");
}

// A config the run must refuse at start: what is wrong, the edits that make it, and what the error
// must name.
struct Refusal {
  const char* what;
  std::vector<std::pair<std::string, std::string>> edits;
  std::vector<std::string> named;
};

// Each refusal's config (`write` writes it to a file with the output_dir it is given) under mpirun
// -np 4 (job tag `tag`): the run fails naming the config file and everything the refusal names, and
// writes nothing.
inline void check_refusals(
    const std::string& tag, const std::vector<Refusal>& refusals,
    const std::function<void(const fs::path&, const fs::path&, const std::vector<std::pair<std::string, std::string>>&)>& write) {
  require_tiny_model();
  mlpt_test::TempDir dir(tag.c_str());
  const fs::path out = fs::path(dir.str()) / "run", config = fs::path(dir.str()) / "refused.toml";
  for (const auto& r : refusals) {
    INFO(r.what);
    write(config, out, r.edits);
    int status = 0;
    const std::string output = mlpt_test::run_command(launch(tag, 300, false) + config.string() + " 2>&1", &status);
    INFO(output);
    CHECK(WEXITSTATUS(status) != 0);
    CHECK(output.find(config.string()) != std::string::npos);
    for (const auto& name : r.named) CHECK(output.find(name) != std::string::npos);
    CHECK_FALSE(fs::exists(out));
  }
}

// A letters run of `config` (job tag `tag`) under mpirun -np 4: it must finish (converged, or not
// within max_steps), train on trajectories at most one version stale, and learn by the learning
// runs' one criterion (learning_curve.hpp). Returns whether it converged.
inline bool check_letters_run(const std::string& tag, const fs::path& config, const fs::path& out) {
  int status = 0;
  const auto started = std::chrono::steady_clock::now();
  const std::string output = mlpt_test::run_command(launch(tag, 1500, false) + config.string() + " 2>&1", &status);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  INFO(output);
  const int run_status = WEXITSTATUS(status);
  REQUIRE((run_status == 0 || run_status == 1));
  const bool converged = run_status == 0;
  const auto curve = mlpt_test::read_learning_curve(out / "metrics.jsonl");
  REQUIRE(curve.rewards.size() >= 6);
  for (auto st : curve.staleness) CHECK(st <= 1);
  WARN(tag << " letters run (" << seconds << " s): " << curve.describe(converged));
  CHECK(curve.learned(converged));
  return converged;
}

// Every compliance rule of the open division holds for the run's result log (reaching the target
// only if it converged).
inline void check_result_log(const fs::path& result_log, bool converged) {
  int status = 0;
  auto log = nlohmann::json::parse(mlpt_test::run_command(
      std::string(MLPT_BUILD_DIR) + "/bin/mlpt check log --division open --json " + result_log.string(), &status));
  INFO(log.dump(2));
  REQUIRE(log["rules"].size() > 5);
  for (const auto& rule : log["rules"]) {
    // The tiny validation set is not the rules' 251 tasks, and what only the stored MLCommons
    // checker requires (eval_samples == 256) is not a rule: neither applies to this run.
    if (rule["authority"] == "checker" || rule["id"] == "eval_samples_rules") continue;
    if (rule["id"] != "eval_target" || converged) CHECK(rule["passed"].get<bool>());
  }
}

}  // namespace dist_run_test
