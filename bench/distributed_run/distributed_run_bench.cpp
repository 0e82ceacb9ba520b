// The per-step overhead of the distributed coordinator: configs/tiny.toml in one process against
// configs/tiny-distributed.toml over four processes (mpirun: coordinator, trainer rank, two rollout
// workers), the same steps of the same run measured in the same invocation. Both run N steps with
// validation pushed out of reach, so a step is waiting for rollouts, training and the refit.
// Reports the mean wall time per step (steps 2..N: the first one includes start-up), its split,
// and the ratio distributed / single.
//
//   bench_distributed_run [--steps N]     (default 8; needs scripts/prepare-tiny.sh's cache)
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#include <nlohmann/json.hpp>

#include "bench_cache.hpp"  // bench/support
#include "mpirun_command.hpp"  // tests/support

namespace fs = std::filesystem;

namespace {

struct StepTimes {
  double step_s = 0, wait_s = 0, train_s = 0, transfer_s = 0;
  int steps = 0;
};

std::string read(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

void replace(std::string& text, const std::string& from, const std::string& to) {
  auto at = text.find(from);
  if (at == std::string::npos) {
    std::fprintf(stderr, "bench: '%s' not found in the config\n", from.c_str());
    std::exit(2);
  }
  text.replace(at, from.size(), to);
}

// The bundled config with its run folder in `out`, `steps` steps and no validation.
fs::path bench_config(const std::string& name, const fs::path& out, int steps) {
  std::string text = read(fs::path(MLPT_SOURCE_DIR) / "configs" / name);
  const std::string folder = name.substr(0, name.size() - 5);
  replace(text, "output_dir = \"${MLPT_CACHE_DIR}/runs/" + folder + "\"", "output_dir = \"" + (out / folder).string() + "\"");
  replace(text, "first_eval_samples = 960", "first_eval_samples = 1000000");
  replace(text, "max_steps = 30", "max_steps = " + std::to_string(steps));
  replace(text, "checkpoint_every_steps = 5", "checkpoint_every_steps = 0");
  replace(text, "\"../tasks/", "\"" + std::string(MLPT_SOURCE_DIR) + "/tasks/");
  replace(text, "\"../tasks/", "\"" + std::string(MLPT_SOURCE_DIR) + "/tasks/");
  fs::path file = out / name;
  std::ofstream(file) << text;
  return file;
}

StepTimes measure(const std::string& command, const fs::path& run_dir) {
  std::fprintf(stderr, "bench: %s\n", command.c_str());
  if (std::system(command.c_str()) != 0 && !fs::exists(run_dir / "metrics.jsonl")) {
    std::fprintf(stderr, "bench: the run failed\n");
    std::exit(1);
  }
  StepTimes t;
  std::ifstream metrics(run_dir / "metrics.jsonl");
  double previous = 0;
  for (std::string line; std::getline(metrics, line);) {
    auto j = nlohmann::json::parse(line);
    const double elapsed = j["elapsed_s"];
    if (j["step"].get<int>() > 1) {
      t.step_s += elapsed - previous, t.wait_s += j["wait_s"].get<double>();
      t.train_s += j["train_s"].get<double>(), t.transfer_s += j["transfer_s"].get<double>();
      ++t.steps;
    }
    previous = elapsed;
  }
  if (t.steps == 0) {
    std::fprintf(stderr, "bench: no steps measured in %s\n", (run_dir / "metrics.jsonl").c_str());
    std::exit(1);
  }
  return t;
}

void print(const char* name, const StepTimes& t) {
  std::printf("%-28s %8.3f s/step   wait %7.3f   train %7.3f   refit %7.3f   (%d steps)\n", name, t.step_s / t.steps,
              t.wait_s / t.steps, t.train_s / t.steps, t.transfer_s / t.steps, t.steps);
}

}  // namespace

int main(int argc, char** argv) {
  int steps = 8;
  for (int i = 1; i + 1 < argc; ++i)
    if (std::string(argv[i]) == "--steps") steps = std::atoi(argv[i + 1]);
  const std::string cache_dir = mlpt::bench::cache_dir().string();
  if (!fs::exists(cache_dir + "/models/tiny/config.json")) {
    std::fprintf(stderr, "bench: %s/models/tiny is missing: run scripts/prepare-tiny.sh\n", cache_dir.c_str());
    return 2;
  }
  const fs::path out = fs::temp_directory_path() / ("mlpt-bench-distributed-" + std::to_string(::getpid()));
  fs::remove_all(out);
  fs::create_directories(out);
  const std::string env = "MLPT_CACHE_DIR=" + cache_dir + " MLPT_PLUGIN_PATH=" + MLPT_PLUGIN_DIR + " ";
  const std::string mlpt = std::string(MLPT_BUILD_DIR) + "/bin/mlpt";
  const fs::path single = bench_config("tiny.toml", out, steps), distributed = bench_config("tiny-distributed.toml", out, steps);
  StepTimes one = measure(env + mlpt + " run " + single.string() + " > " + (out / "single.log").string() + " 2>&1", out / "tiny");
  StepTimes four = measure(env + mlpt_test::mpirun_command(4) + mlpt + " run " +
                               distributed.string() + " > " + (out / "distributed.log").string() + " 2>&1",
                           out / "tiny-distributed");
  std::printf("tiny letters run, %d steps (4 prompts x 16 rollouts), %u cores\n", steps, std::thread::hardware_concurrency());
  print("single process (baseline)", one);
  print("mpirun -np 4 (coordinator)", four);
  std::printf("ratio distributed / single: %.2f (per-step overhead %+.3f s)\n", four.step_s / four.steps / (one.step_s / one.steps),
              four.step_s / four.steps - one.step_s / one.steps);
  fs::remove_all(out);
  return 0;
}
