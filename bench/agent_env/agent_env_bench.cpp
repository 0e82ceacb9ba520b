// Agent environment throughput: golden-patch rollouts (harness + sandbox + reward plugins, as in
// tests/integration/agent_env) with N = 1, 2, 4 concurrent sandboxes, cost split into create /
// exec / grade / destroy, against a same-run baseline: one plain `python3 -m pytest` of the same
// hidden tests on the host, without a sandbox.
//
//   bench_agent_env [ROLLOUTS_PER_WORKER=2] [TASK_LIMIT=3]
// Needs the task images (scripts/build-task-images.sh) in ${MLPT_CACHE_DIR:-.cache}/images.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <algorithm>
#include <mutex>
#include <set>
#include <unistd.h>
#include <thread>

#include "bench_cache.hpp"  // bench/support
#include "core/components/instances.hpp"
#include "core/plugin/plugin.hpp"
#include "core/rollout/task_record.hpp"

namespace fs = std::filesystem;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

struct Cost {
  double create = 0, exec = 0, grade = 0, destroy = 0;
  int rollouts = 0, rewarded = 0;
  void add(const Cost& o) {
    create += o.create, exec += o.exec, grade += o.grade, destroy += o.destroy;
    rollouts += o.rollouts, rewarded += o.rewarded;
  }
};

int sh(const std::string& cmd) { return std::system(cmd.c_str()); }

}  // namespace

int main(int argc, char** argv) {
  const int per_worker = argc > 1 ? std::atoi(argv[1]) : 2;
  const size_t task_limit = argc > 2 ? std::atoi(argv[2]) : 3;
  const fs::path images = mlpt::bench::cache_dir() / "images";
  try {
    mlpt::plugin::HostServices host;
    auto load = [&](const char* n) { return mlpt::plugin::Plugin::load(fs::path(MLPT_PLUGIN_DIR) / n, host); };
    auto sandbox_so = load("libmlpt_sandbox_apptainer.so");
    auto harness_so = load("libmlpt_harness_openhands.so");
    auto reward_so = load("libmlpt_reward_r2e.so");
    mlpt::components::SandboxRuntime runtime(sandbox_so->component(MLPT_COMPONENT_SANDBOX), json::object());
    mlpt::components::Harness harness(harness_so->component(MLPT_COMPONENT_HARNESS, "openhands"), json::object());
    mlpt::components::Reward reward(reward_so->component(MLPT_COMPONENT_REWARD, "r2e"), {{"images", images.string()}});
    auto tasks = mlpt::rollout::load_task_records(fs::path(MLPT_SOURCE_DIR) / "tasks" / "suite.jsonl");
    std::map<std::string, json> golden;
    std::ifstream g(fs::path(MLPT_SOURCE_DIR) / "tasks" / "golden.jsonl");
    for (std::string line; std::getline(g, line);)
      if (!line.empty()) golden[json::parse(line)["instance_id"]] = json::parse(line);
    // One task per project first, so a small limit still covers every project.
    std::vector<const mlpt::rollout::TaskRecord*> chosen;
    std::set<std::string> repos;
    for (auto& t : tasks) if (repos.insert(t.repo_name).second) chosen.push_back(&t);
    for (auto& t : tasks) if (chosen.size() < task_limit && std::find(chosen.begin(), chosen.end(), &t) == chosen.end()) chosen.push_back(&t);
    chosen.resize(std::min(chosen.size(), task_limit));
    for (auto* t : chosen)
      if (!fs::exists(t->image(images))) {
        std::fprintf(stderr, "missing %s: run scripts/build-task-images.sh\n", t->image(images).c_str());
        return 1;
      }

    // Baseline: the same hidden tests, fixed code, plain pytest on the host (no sandbox).
    fs::path work = fs::temp_directory_path() / ("mlpt_bench_agent_env_" + std::to_string(::getpid()));
    fs::create_directories(work);
    double baseline = 0;
    int baseline_runs = 0;
    for (auto* t : chosen) {
      const std::string stem = t->repo_name + "_final_" + t->commit_hash;
      if (sh("python3 " + (fs::path(MLPT_SOURCE_DIR) / "tasks" / "taskgen.py").string() + " rootfs " + work.string() + " " + stem + " >/dev/null") != 0)
        throw std::runtime_error("taskgen rootfs failed");
      fs::path tb = work / stem / "testbed";
      std::ofstream(work / "gold.patch") << golden.at(t->instance_id)["patch"].get<std::string>();
      sh("cd " + tb.string() + " && git apply " + (work / "gold.patch").string());
      for (auto& [path, text] : t->row["hidden_tests"].items()) {
        fs::create_directories((tb / path).parent_path());
        std::ofstream(tb / path) << text.get<std::string>();
      }
      for (int i = 0; i < 3; ++i) {
        auto t0 = Clock::now();
        sh("cd " + tb.string() + " && /usr/bin/python3 -m pytest -rA -p no:cacheprovider r2e_tests >/dev/null 2>&1");
        baseline += since(t0);
        ++baseline_runs;
      }
    }
    fs::remove_all(work);
    baseline /= baseline_runs;
    std::printf("baseline: host python3 -m pytest of the hidden tests: %.3f s per run (%d runs)\n", baseline, baseline_runs);

    auto rollout = [&](const mlpt::rollout::TaskRecord& task, Cost& c) {
      const json& gold = golden.at(task.instance_id);
      auto t0 = Clock::now();
      auto box = runtime.create(task.image(images).string());
      c.create += since(t0);
      t0 = Clock::now();
      auto ep = harness.start(task.row.dump(), runtime.binding(), box->handle());
      for (const auto& e : gold["edits"])
        ep->step({{"content", ""}, {"tool_calls", {{{"name", "str_replace_editor"},
                  {"arguments", {{"command", "str_replace"}, {"path", e["path"]}, {"old_str", e["old_str"]}, {"new_str", e["new_str"]}}}}}}});
      ep->step({{"content", ""}, {"tool_calls", {{{"name", "execute_bash"}, {"arguments", {{"command", "git -C /testbed status --short"}}}}}}});
      ep->step({{"content", ""}, {"tool_calls", {{{"name", "finish"}, {"arguments", {{"message", "done"}}}}}}});
      json result = ep->finish(MLPT_EPISODE_FINISHED);
      ep.reset();
      c.exec += since(t0);
      t0 = Clock::now();
      box.reset();
      c.destroy += since(t0);
      t0 = Clock::now();
      auto gr = reward.grade(task.row.dump(), result.dump(), MLPT_EPISODE_FINISHED, runtime.binding());
      c.grade += since(t0);
      c.rollouts += 1;
      c.rewarded += gr.reward == 1.0;
    };

    const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
    std::printf("cores: %u; %d rollouts per worker over %zu tasks\n", cores, per_worker, chosen.size());
    std::printf("%3s %9s %10s %12s %9s %9s %9s %9s %12s %8s\n", "N", "rollouts", "rollout/s", "rollout/s/c", "create_s",
                "exec_s", "grade_s", "destroy_s", "vs_baseline", "reward1");
    for (int n : {1, 2, 4}) {
      std::vector<Cost> costs(n);
      std::vector<std::thread> workers;
      auto t0 = Clock::now();
      for (int w = 0; w < n; ++w)
        workers.emplace_back([&, w] {
          for (int i = 0; i < per_worker; ++i) rollout(*chosen[(w * per_worker + i) % chosen.size()], costs[w]);
        });
      for (auto& w : workers) w.join();
      const double wall = since(t0);
      Cost total;
      for (auto& c : costs) total.add(c);
      const double per = 1.0 / total.rollouts;
      const double rate = total.rollouts / wall;
      std::printf("%3d %9d %10.3f %12.3f %9.3f %9.3f %9.3f %9.3f %11.1fx %5d/%d\n", n, total.rollouts, rate,
                  rate / std::min<unsigned>(n, cores), total.create * per, total.exec * per, total.grade * per,
                  total.destroy * per, (wall / total.rollouts * n) / baseline, total.rewarded, total.rollouts);
    }
    std::printf("(create/exec/grade/destroy: mean seconds per rollout; vs_baseline: mean rollout latency over one\n"
                " plain host pytest run; grade includes the reward's own sandbox create, apply, tests, destroy)\n");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_agent_env: %s\n", e.what());
    return 1;
  }
  return 0;
}
