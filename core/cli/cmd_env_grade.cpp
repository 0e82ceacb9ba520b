// `mlpt env grade --task ID --patch FILE [...]`: grades one patch outside a run, through the
// sandbox and reward plugins named (by default the bundled ones), in a fresh sandbox from the
// task's image, exactly as a rollout is graded; prints {"reward", "reason", "tests", ...}.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>

#include "core/cli/args.hpp"
#include "core/cli/command.hpp"
#include "core/components/instances.hpp"
#include "core/plugin/plugin.hpp"
#include "core/plugin/plugin_dirs.hpp"
#include "core/rollout/task_record.hpp"

namespace mlpt::cli {
namespace {

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(MLPT_NOT_FOUND, path + ": cannot be read");
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

int env_grade(const std::vector<std::string>& argv) {
  Args args(argv, {}, {"--task", "--patch", "--tasks", "--images", "--sandbox", "--sandbox-config", "--reward",
                           "--grading-mode"});
  const auto task_id = args.option("--task"), patch_file = args.option("--patch");
  if (!task_id || !patch_file) throw Error(MLPT_INVALID_ARGUMENT, "--task and --patch are required");
  const char* cache = std::getenv("MLPT_CACHE_DIR");
  const std::string images = args.option("--images").value_or(std::string(cache && *cache ? cache : ".cache") + "/images");
  auto records = rollout::load_task_records(args.option("--tasks").value_or("tasks/suite.jsonl"));
  const auto& task = rollout::find_task(records, *task_id);
  auto image = task.image(images);
  if (!std::filesystem::exists(image))
    throw Error(MLPT_NOT_FOUND, image.string() + ": image missing; build it with scripts/build-task-images.sh");

  plugin::HostServices host;
  auto sandbox_so = plugin::Plugin::load(plugin::resolve_plugin(args.option("--sandbox").value_or("libmlpt_sandbox_apptainer.so")), host);
  auto reward_so = plugin::Plugin::load(plugin::resolve_plugin(args.option("--reward").value_or("libmlpt_reward_r2e.so")), host);
  nlohmann::json sandbox_settings;
  try {
    sandbox_settings = nlohmann::json::parse(args.option("--sandbox-config").value_or("{}"));
  } catch (const nlohmann::json::exception& e) {
    throw Error(MLPT_INVALID_ARGUMENT, std::string("--sandbox-config is not JSON: ") + e.what());
  }
  components::SandboxRuntime runtime(sandbox_so->component(MLPT_COMPONENT_SANDBOX), sandbox_settings);
  nlohmann::json reward_settings = {{"images", images}};
  if (auto mode = args.option("--grading-mode")) reward_settings["grading_mode"] = *mode;  // the plugin checks it
  components::Reward reward(reward_so->component(MLPT_COMPONENT_REWARD, "r2e"), reward_settings);
  nlohmann::json row = task.row;
  row["image"] = image.string();
  nlohmann::json result = {{"patch", read_all(*patch_file)}};
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

MLPT_COMMAND("env grade",
             "--task ID --patch FILE [--tasks FILE.jsonl] [--images DIR] [--sandbox PLUGIN] [--sandbox-config JSON] [--reward PLUGIN] [--grading-mode hardened|reference]",
             "grade one patch (a git diff against the task's base commit) in a fresh sandbox; prints JSON", &env_grade);

}  // namespace mlpt::cli
