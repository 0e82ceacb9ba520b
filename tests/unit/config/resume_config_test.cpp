// What `mlpt run --resume` lets a config change: keys that place the work (layout, ranks, threads,
// devices) with a note, never a key that defines the run's results (model, data, GRPO, optimizer,
// seeds), and a run folder from before run.json recorded the keys refuses any change.
#include <unistd.h>

#include <catch2/catch.hpp>

#include <fstream>

#include "core/error.hpp"
#include "core/run/resume_config.hpp"
#include "core/run/run_dir.hpp"

using namespace mlpt;
namespace fs = std::filesystem;

namespace {

const char* kConfig = R"([run]
seed = 7
rollout_workers = 16
[benchmark]
learning_rate = 1e-2
[placement]
trainer_ranks = 2
[components.trainer.settings]
checkpoint = "models/tiny"
tensor_parallel = 2
[components.trainer.settings.optimizer]
lr = 1e-2
[components.engine.settings]
threads = 1
)";

std::string replaced(std::string text, const std::string& from, const std::string& to) {
  const auto at = text.find(from);
  REQUIRE(at != std::string::npos);
  return text.replace(at, from.size(), to);
}

struct RunFolder {
  fs::path dir = fs::temp_directory_path() / ("mlpt_resume_config_test." + std::to_string(::getpid()));
  fs::path config = dir / "run.toml";
  RunFolder() {
    fs::remove_all(dir);
    fs::create_directories(dir);
    std::ofstream(config) << kConfig;
    run::write_run_marker(dir, config);
  }
  ~RunFolder() { fs::remove_all(dir); }
  void edit(const std::string& text) const { std::ofstream(config, std::ios::trunc) << text; }
  std::string refusal() const {
    try {
      run::check_resumed_config(dir, config);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  }
};

}  // namespace

TEST_CASE("the layout, ranks, threads and transport only place the work, while the model, data, GRPO, optimizer and seeds define the results") {
  for (const std::vector<std::string>& key : std::vector<std::vector<std::string>>{
           {"placement", "trainer_ranks"}, {"placement", "engine_ranks"},
           {"components", "trainer", "settings", "tensor_parallel"}, {"components", "trainer", "settings", "expert_parallel"},
           {"components", "engine", "settings", "tensor_parallel"}, {"components", "engine", "settings", "threads"},
           {"components", "transport", "settings", "receivers"}, {"components", "transport", "plugin"},
           {"run", "rollout_workers"}}) {
    INFO(key.back());
    CHECK(run::only_places_work(key));
  }
  for (const std::vector<std::string>& key : std::vector<std::vector<std::string>>{
           {"run", "seed"}, {"benchmark", "learning_rate"}, {"benchmark", "num_generations_per_prompt"}, {"dataset", "train"},
           {"components", "trainer", "settings", "checkpoint"}, {"components", "trainer", "settings", "optimizer", "lr"},
           {"components", "trainer", "settings", "loss", "tis_min"}, {"components", "trainer", "plugin"},
           {"components", "engine", "settings", "checkpoint"}, {"components", "reward", "plugin"},
           {"placementx", "trainer_ranks"}}) {
    INFO(key.back());
    CHECK_FALSE(run::only_places_work(key));
  }
}

TEST_CASE("config_changes names each changed key as the config writes it, with both values") {
  const nlohmann::json before = {{"run", {{"seed", 7}}}, {"components", {{"trainer", {{"settings", {{"tensor_parallel", 2}}}}}}}};
  const nlohmann::json after = {{"run", {{"seed", 8}}},
                                {"components", {{"trainer", {{"settings", {{"expert_parallel", 2}}}}}}}};
  const auto changes = run::config_changes(before, after);
  REQUIRE(changes.size() == 3);
  CHECK(changes[0].key == "[components.trainer.settings] expert_parallel");
  CHECK(changes[0].before == "(not set)");
  CHECK(changes[0].after == "2");
  CHECK(changes[0].places_work);
  CHECK(changes[1].key == "[components.trainer.settings] tensor_parallel");
  CHECK(changes[1].after == "(not set)");
  CHECK(changes[2].key == "[run] seed");
  CHECK(changes[2].before == "7");
  CHECK_FALSE(changes[2].places_work);
  CHECK(run::config_changes(before, before).empty());
}

TEST_CASE("check_resumed_config returns another layout as a note and refuses a changed result key naming it") {
  RunFolder run;
  CHECK(run::check_resumed_config(run.dir, run.config).empty());
  run.edit(std::string(kConfig) + "# a comment changes no key\n");
  CHECK(run::check_resumed_config(run.dir, run.config).empty());

  run.edit(replaced(replaced(kConfig, "tensor_parallel = 2", "expert_parallel = 2"), "threads = 1", "threads = 4"));
  const auto notes = run::check_resumed_config(run.dir, run.config);
  REQUIRE(notes.size() == 3);
  CHECK(notes[0].key == "[components.engine.settings] threads");
  CHECK(notes[1].key == "[components.trainer.settings] expert_parallel");
  CHECK(notes[2].key == "[components.trainer.settings] tensor_parallel");

  run.edit(replaced(replaced(kConfig, "seed = 7", "seed = 8"), "lr = 1e-2", "lr = 2e-2"));
  const std::string refused = run.refusal();
  CHECK_THAT(refused, Catch::Contains(run.config.string() + " changed since the run in"));
  CHECK_THAT(refused, Catch::Contains("[run] seed was 7, now 8"));
  CHECK_THAT(refused, Catch::Contains("[components.trainer.settings.optimizer] lr was 0.01, now 0.02"));
  CHECK_THAT(refused, Catch::Contains("keeps every key that defines its results"));

  // Another file with the same output folder: named as another config.
  const fs::path other = run.dir / "other.toml";
  std::ofstream(other) << replaced(kConfig, "learning_rate = 1e-2", "learning_rate = 1e-3");
  try {
    run::check_resumed_config(run.dir, other);
    FAIL("a changed learning_rate was accepted");
  } catch (const Error& e) {
    CHECK_THAT(std::string(e.what()), Catch::Contains("is not the config the run in") && Catch::Contains("[benchmark] learning_rate"));
  }
}

TEST_CASE("a run folder whose run.json predates the recorded keys refuses any change, as before") {
  RunFolder run;
  nlohmann::json marker = nlohmann::json::parse(std::ifstream(run.dir / "run.json"));
  marker.erase("config_keys");  // as run.json was written before
  std::ofstream(run.dir / "run.json", std::ios::trunc) << marker.dump();
  CHECK(run::check_resumed_config(run.dir, run.config).empty());
  run.edit(replaced(kConfig, "tensor_parallel = 2", "tensor_parallel = 1"));
  CHECK_THAT(run.refusal(), Catch::Contains("predates recording the config's keys"));
}
