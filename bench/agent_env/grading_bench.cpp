// Grading cost of the hardened grading mode's supervised test run (plugins/reward_r2e/witness_record.hpp:
// a judge outside the test interpreter, one test process per test, the hidden tests sealed by
// Landlock) against the reference mode's unsupervised one: every bundled task's golden patch graded in both,
// interleaved (hardened, reference, hardened, ...) so
// both see the same machine load; reported as mean seconds per grade, split into sandbox create,
// patch apply and test run, and the ratio on/off. Both must give every golden patch reward 1
// (tasks/taskgen.py check proves each applies at its base and gives the fix).
//
//   bench_grading [ROUNDS=3]
// Needs the task images (scripts/build-task-images.sh) in ${MLPT_CACHE_DIR:-.cache}/images.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "bench_cache.hpp"  // bench/support
#include "core/components/instances.hpp"
#include "core/plugin/plugin.hpp"
#include "core/rollout/task_record.hpp"

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

struct Cost {
  double total = 0, create = 0, apply = 0, tests = 0;
  int grades = 0, rewarded = 0;
};

void add(Cost& c, const mlpt::components::Grade& g, double seconds) {
  const json t = g.details.is_object() ? g.details.value("timing", json::object()) : json::object();
  c.total += seconds, c.create += t.value("create_s", 0.0), c.apply += t.value("apply_s", 0.0), c.tests += t.value("tests_s", 0.0);
  c.grades += 1, c.rewarded += g.reward == 1.0;
}

}  // namespace

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::max(1, std::atoi(argv[1])) : 3;
  const fs::path images = mlpt::bench::cache_dir() / "images";
  try {
    mlpt::plugin::HostServices host;
    auto load = [&](const char* n) { return mlpt::plugin::Plugin::load(fs::path(MLPT_PLUGIN_DIR) / n, host); };
    auto sandbox_so = load("libmlpt_sandbox_apptainer.so");
    auto reward_so = load("libmlpt_reward_r2e.so");
    mlpt::components::SandboxRuntime runtime(sandbox_so->component(MLPT_COMPONENT_SANDBOX), json::object());
    mlpt::components::Reward supervised(reward_so->component(MLPT_COMPONENT_REWARD, "r2e"), {{"images", images.string()}});
    mlpt::components::Reward output_only(reward_so->component(MLPT_COMPONENT_REWARD, "r2e"),
                                         {{"images", images.string()}, {"grading_mode", "reference"}});
    std::vector<mlpt::rollout::TaskRecord> tasks;
    for (const char* f : {"suite.jsonl", "validation.jsonl"})
      for (auto& t : mlpt::rollout::load_task_records(fs::path(MLPT_SOURCE_DIR) / "tasks" / f)) tasks.push_back(t);
    std::map<std::string, std::string> patch_of;
    std::ifstream g(fs::path(MLPT_SOURCE_DIR) / "tasks" / "golden.jsonl");
    for (std::string line; std::getline(g, line);)
      if (!line.empty()) {
        json row = json::parse(line);
        patch_of[row["instance_id"]] = row["patch"];
      }
    Cost on, off;
    int wrong_rewards = 0;
    for (int r = 0; r < rounds; ++r)
      for (const auto& t : tasks) {
        const std::string result = json{{"patch", patch_of.at(t.instance_id)}, {"untracked_at_start", json::array()}}.dump();
        double rewards[2];
        for (auto* which : {&supervised, &output_only}) {
          auto t0 = std::chrono::steady_clock::now();
          auto grade = which->grade(t.row.dump(), result, MLPT_EPISODE_FINISHED, runtime.binding());
          add(which == &supervised ? on : off, grade, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
          rewards[which == &supervised] = grade.reward;
        }
        if (rewards[0] != 1 || rewards[1] != 1) {
          ++wrong_rewards;
          std::fprintf(stderr, "bench_grading: %s: a golden patch scored hardened %.0f, reference %.0f (want 1 and 1)\n",
                       t.instance_id.c_str(), rewards[1], rewards[0]);
        }
      }
    std::printf("%-14s %7s %9s %9s %9s %9s %9s\n", "grader", "grades", "reward1", "total_s", "create_s", "apply_s", "tests_s");
    for (auto [name, c] : {std::pair{"reference", &off}, std::pair{"hardened", &on}})
      std::printf("%-14s %7d %9d %9.3f %9.3f %9.3f %9.3f\n", name, c->grades, c->rewarded, c->total / c->grades, c->create / c->grades,
                  c->apply / c->grades, c->tests / c->grades);
    std::printf("ratio hardened/reference: total %.2fx, test run %.2fx (mean seconds per grade, %d tasks x %d rounds)\n",
                on.total / off.total, on.tests / off.tests, static_cast<int>(tasks.size()), rounds);
    return wrong_rewards == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_grading: %s\n", e.what());
    return 1;
  }
}
