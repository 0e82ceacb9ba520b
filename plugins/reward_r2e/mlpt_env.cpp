// mlpt-env (`mlpt env ...`): grading one patch outside a run.
//
//   mlpt env grade --task ID --patch FILE [--tasks tasks/suite.jsonl] [--images DIR]
//                  [--sandbox PLUGIN] [--sandbox-config JSON] [--reward PLUGIN]
//
// Loads the sandbox and reward plugins by name, creates a fresh sandbox from the task's image
// through the reward (exactly as a rollout is graded) and prints {"reward", "reason", "tests", ...}.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>

#include "core/components/instances.hpp"
#include "core/error.hpp"
#include "core/plugin/plugin.hpp"
#include "core/plugin/plugin_dirs.hpp"
#include "core/rollout/task_record.hpp"

namespace {

const char* kUsage =
    "usage: mlpt env grade --task ID --patch FILE [--tasks FILE.jsonl] [--images DIR]\n"
    "                      [--sandbox PLUGIN] [--sandbox-config JSON] [--reward PLUGIN]\n"
    "Grades FILE (a git diff against the task's base commit) in a fresh sandbox and prints JSON.\n"
    "Defaults: --tasks tasks/suite.jsonl, --images ${MLPT_CACHE_DIR:-.cache}/images,\n"
    "          --sandbox libmlpt_sandbox_apptainer.so, --reward libmlpt_reward_r2e.so\n";

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw mlpt::Error(MLPT_NOT_FOUND, path + ": cannot be read");
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

int grade(int argc, char** argv) {
  std::string task_id, patch_file, tasks = "tasks/suite.jsonl", sandbox_plugin = "libmlpt_sandbox_apptainer.so",
                                      reward_plugin = "libmlpt_reward_r2e.so", sandbox_config = "{}";
  const char* cache = std::getenv("MLPT_CACHE_DIR");
  std::string images = std::string(cache && *cache ? cache : ".cache") + "/images";
  for (int i = 0; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) throw mlpt::Error(MLPT_INVALID_ARGUMENT, a + " needs a value\n" + kUsage);
      return argv[++i];
    };
    if (a == "--task") task_id = value();
    else if (a == "--patch") patch_file = value();
    else if (a == "--tasks") tasks = value();
    else if (a == "--images") images = value();
    else if (a == "--sandbox") sandbox_plugin = value();
    else if (a == "--sandbox-config") sandbox_config = value();
    else if (a == "--reward") reward_plugin = value();
    else throw mlpt::Error(MLPT_INVALID_ARGUMENT, "unknown argument " + a + "\n" + kUsage);
  }
  if (task_id.empty() || patch_file.empty())
    throw mlpt::Error(MLPT_INVALID_ARGUMENT, std::string("--task and --patch are required\n") + kUsage);
  auto records = mlpt::rollout::load_task_records(tasks);
  const auto& task = mlpt::rollout::find_task(records, task_id);
  auto image = task.image(images);
  if (!std::filesystem::exists(image))
    throw mlpt::Error(MLPT_NOT_FOUND, image.string() + ": image missing; build it with scripts/build-task-images.sh");

  mlpt::plugin::HostServices host;
  auto sandbox_so = mlpt::plugin::Plugin::load(mlpt::plugin::resolve_plugin(sandbox_plugin), host);
  auto reward_so = mlpt::plugin::Plugin::load(mlpt::plugin::resolve_plugin(reward_plugin), host);
  mlpt::components::SandboxRuntime runtime(sandbox_so->component(MLPT_COMPONENT_SANDBOX), nlohmann::json::parse(sandbox_config));
  mlpt::components::Reward reward(reward_so->component(MLPT_COMPONENT_REWARD, "r2e"), {{"images", images}});
  nlohmann::json row = task.row;
  row["image"] = image.string();
  nlohmann::json result = {{"patch", read_all(patch_file)}};
  auto g = reward.grade(row.dump(), result.dump(), MLPT_EPISODE_FINISHED, runtime.binding());
  nlohmann::json out = {{"instance_id", task.instance_id}, {"reward", g.reward}, {"flags", g.flags}};
  if (g.details.is_object()) {
    out["reason"] = g.details.value("reason", "");
    out["tests"] = g.details.value("tests", nlohmann::json::object());
    out["details"] = g.details;
  }
  std::cout << out.dump(2) << "\n";
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const bool help = std::any_of(argv + 1, argv + argc, [](const char* a) { return std::string(a) == "--help" || std::string(a) == "-h"; });
    if (argc < 2 || help) {
      std::fputs(kUsage, argc < 2 ? stderr : stdout);
      return argc < 2 ? 2 : 0;
    }
    if (std::string(argv[1]) != "grade") throw mlpt::Error(MLPT_INVALID_ARGUMENT, std::string("unknown sub-command ") + argv[1] + "\n" + kUsage);
    return grade(argc - 2, argv + 2);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mlpt env: %s\n", e.what());
    return 1;
  }
}
