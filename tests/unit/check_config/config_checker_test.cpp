// `mlpt check config`: a compliant closed config passes; breaking each rule once fails that rule.
#include "core/check/config_checker.hpp"

#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "core/run/dataset.hpp"

using namespace mlpt;

namespace {

const std::string kTrain = MLPT_SOURCE_DIR "/tasks/letters/train.jsonl";
const std::string kValidation = MLPT_SOURCE_DIR "/tasks/letters/validation.jsonl";

std::string sha(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return run::sha256_hex(s.str());
}

std::string base_config() {
  return R"([run]
name = "t"
output_dir = "/tmp/mlpt-check-config-out"
seed = 3
division = "closed"
[benchmark]
num_prompts_per_step = 16
max_trajectory_age_steps = 1
[dataset]
train = ")" +
         kTrain + R"("
validation = ")" +
         kValidation + R"("
tokenizer = "/nonexistent/tokenizer.json"
train_sha256 = ")" +
         sha(kTrain) + R"("
validation_sha256 = ")" +
         sha(kValidation) + R"("
[components.trainer]
plugin = "x.so"
[components.engine]
plugin = "x.so"
[components.transport]
plugin = "x.so"
[components.harness]
plugin = "x.so"
[components.reward]
plugin = "x.so"
[components.reward.settings]
grading_mode = "reference"
)";
}

check::ConfigReport check_text(const std::string& text) {
  auto path =
      std::filesystem::temp_directory_path() / ("mlpt_check_config." + std::to_string(::getpid()) + ".toml");
  std::ofstream(path) << text;
  return check::check_config(run::read_run_config(path), std::nullopt,
                             /*load_plugins=*/false);  // the rules alone ("x.so")
}

std::vector<std::string> failed(const check::ConfigReport& r) {
  std::vector<std::string> ids;
  for (const auto& rule : r.rules)
    if (!rule.passed()) ids.push_back(rule.id);
  return ids;
}

// Adds `line` to the [benchmark] table of the base config.
std::string with_benchmark(const std::string& line) {
  return std::regex_replace(base_config(), std::regex("\\[benchmark\\]\n"), "[benchmark]\n" + line + "\n");
}

}  // namespace

TEST_CASE("a closed-division config with the formulas' values and declared hashes is compliant") {
  auto r = check_text(base_config());
  INFO(check::format_report(r));
  CHECK(r.compliant());
  CHECK(r.unverified.empty());
}

TEST_CASE("each closed-division rule fails alone when broken") {
  using V = std::vector<std::string>;
  CHECK(failed(check_text(with_benchmark("num_generations_per_prompt = 8"))) ==
        V{"num_generations_per_prompt", "global_batch_size", "global_batch_size_allowed"});
  CHECK(failed(check_text(with_benchmark("max_sequence_length = 32768"))) == V{"max_sequence_length"});
  CHECK(failed(check_text(with_benchmark("max_turns = 50"))) == V{"max_turns"});
  CHECK(failed(check_text(with_benchmark("eval_k = 8"))) == V{"eval_k"});
  CHECK(failed(check_text(with_benchmark("target_accuracy = 0.5"))) == V{"target_accuracy"});
  CHECK(failed(check_text(with_benchmark("learning_rate = 1.01e-6"))) == V{"learning_rate"});  // 1e-8 off
  CHECK(
      failed(check_text(with_benchmark("learning_rate = 1.0000001e-6"))).empty());  // 1e-13 off: within 1e-9
  CHECK(failed(check_text(with_benchmark("gradient_clip_norm = 0.2"))) == V{"gradient_clip_norm"});
  CHECK(failed(check_text(with_benchmark("validation_temperature = 0.7"))) == V{"sampling"});
  CHECK(failed(check_text(with_benchmark("first_eval_samples = 256"))) == V{"eval_schedule"});
  CHECK(failed(check_text(with_benchmark("agent_timeout_s = 3600"))) == V{"timeouts"});
  // The merged rules (PR #598) fix every command and test run at 60 s: the older reference
  // config's 300/300/180 s no longer pass, each alone.
  CHECK(failed(check_text(with_benchmark("command_timeout_s = 300"))) == V{"timeouts"});
  CHECK(failed(check_text(with_benchmark("test_timeout_s = 300"))) == V{"timeouts"});
  CHECK(failed(check_text(with_benchmark("validation_test_timeout_s = 180"))) == V{"timeouts"});
  CHECK(failed(check_text(with_benchmark(
                   "command_timeout_s = 60\ntest_timeout_s = 60\nvalidation_test_timeout_s = 60\n"
                   "agent_timeout_s = 1800")))
            .empty());
  CHECK(failed(check_text(std::regex_replace(base_config(), std::regex("max_trajectory_age_steps = 1\n"),
                                             ""))) == V{"max_trajectory_age_steps"});
  CHECK(failed(check_text(std::regex_replace(base_config(), std::regex("num_prompts_per_step = 16"),
                                             "num_prompts_per_step = 4"))) ==
        V{"global_batch_size_allowed"});  // the formulas follow the GBS, so only the table rule fails
  CHECK(failed(check_text(std::regex_replace(base_config(), std::regex("train_sha256 = \"[0-9a-f]+\""),
                                             "train_sha256 = \"00\""))) == V{"dataset_train"});
  CHECK(failed(check_text(std::regex_replace(base_config(), std::regex("validation_sha256 = \"[0-9a-f]+\"\n"),
                                             ""))) == V{"dataset_validation"});
}

TEST_CASE("the open division frees the hyperparameters but keeps the structure") {
  auto open = std::regex_replace(base_config(), std::regex("division = \"closed\""), "division = \"open\"");
  auto with = [&](const std::string& line) {
    return std::regex_replace(open, std::regex("\\[benchmark\\]\n"), "[benchmark]\n" + line + "\n");
  };
  CHECK(failed(check_text(with("learning_rate = 3e-6"))).empty());
  CHECK(failed(check_text(with("validation_temperature = 0.7"))).empty());
  CHECK(failed(check_text(with("max_sequence_length = 32768"))) ==
        std::vector<std::string>{"max_sequence_length"});
}

TEST_CASE("the closed division grades as R2E-Gym does, the open division accepts both grading modes") {
  using V = std::vector<std::string>;
  const std::string reference = "grading_mode = \"reference\"\n";
  auto mode = [&](const std::string& division, const std::string& line) {
    std::string text = std::regex_replace(base_config(), std::regex("division = \"closed\""),
                                          "division = \"" + division + "\"");
    return check_text(text.replace(text.find(reference), reference.size(), line));
  };
  CHECK(failed(mode("closed", reference)).empty());
  CHECK(failed(mode("closed", "grading_mode = \"hardened\"\n")) == V{"grading_mode"});
  CHECK(failed(mode("closed", "")) == V{"grading_mode"});      // the plugin's default is hardened
  CHECK(failed(mode("closed", "witness = false\n")).empty());  // the older key for the reference mode
  auto r = mode("closed", "grading_mode = \"hardened\"\n");
  CHECK_THAT(check::format_report(r), Catch::Contains("'components.reward.settings.grading_mode'") &&
                                          Catch::Contains("grading_mode = \"reference\""));
  for (const char* line : {"grading_mode = \"reference\"\n", "grading_mode = \"hardened\"\n", ""})
    CHECK(failed(mode("open", line)).empty());
  CHECK(failed(mode("open", "grading_mode = \"strict\"\n")) == V{"grading_mode"});
}

TEST_CASE("the trainer's and the engine's parallel layouts must fit [placement]") {
  using V = std::vector<std::string>;
  // `trainer` and `engine`: settings lines of each; `placement`: the [placement] table's lines.
  auto layout = [](const std::string& trainer, const std::string& engine, const std::string& placement) {
    std::string text = base_config();
    auto settings = [&](const std::string& kind, const std::string& lines) {
      const std::string table = "[components." + kind + "]\nplugin = \"x.so\"\n";
      if (!lines.empty())
        text.replace(text.find(table), table.size(), table + "[components." + kind + ".settings]\n" + lines);
    };
    settings("trainer", trainer);
    settings("engine", engine);
    if (!placement.empty()) text += "[placement]\n" + placement;
    return check_text(text);
  };
  CHECK(failed(layout("", "", "")).empty());  // one process, one rank per layout
  CHECK(failed(layout("tensor_parallel = 2\n", "", "")) == V{"placement_trainer"});
  CHECK(failed(layout("tensor_parallel = 2\npipeline_parallel = 2\n", "", "trainer_ranks = 8\n"))
            .empty());  // DP2
  CHECK(
      failed(
          layout(
              "tensor_parallel = 4\nexpert_parallel = 8\npipeline_parallel = 2\nexpert_tensor_parallel = 1\n",
              "tensor_parallel = 8\n", "trainer_ranks = 64\nengine_ranks = 8\n"))
          .empty());  // the reference's placement
  auto r = layout("tensor_parallel = 4\n", "", "trainer_ranks = 6\n");
  CHECK(failed(r) == V{"placement_trainer"});
  CHECK_THAT(check::format_report(r),
             Catch::Contains("trainer_ranks = 6 is not a multiple of the trainer's 4 ranks"));
  r = layout("", "tensor_parallel = 8\n", "engine_ranks = 4\n");
  CHECK(failed(r) == V{"placement_engine"});
  CHECK_THAT(check::format_report(r), Catch::Contains("engine_ranks = 4 is not the engine's 8 ranks"));
  r = layout("tensor_parallel = \"two\"\n", "", "");
  CHECK(failed(r) == V{"placement_trainer"});
  CHECK_THAT(check::format_report(r), Catch::Contains("is not a positive integer"));
}

TEST_CASE("the shipped real-benchmark configs pass the closed rules, at the reference's placement") {
  setenv("MLPT_RUN_DIR", "/tmp/mlpt-runs", 0);
  setenv("MLPT_DATA_DIR", "/nonexistent-data", 0);
  for (int gbs : {256, 512, 1024}) {
    INFO("gbs " << gbs);
    // The rules alone: its plugins (NCCL) need the CUDA build.
    const run::RunConfig config = run::read_run_config(
        std::string(MLPT_SOURCE_DIR) + "/configs/qwen35-397b/gbs" + std::to_string(gbs) + ".toml");
    auto r = check::check_config(config, std::nullopt, false);
    INFO(check::format_report(r));
    CHECK(r.compliant());
    CHECK(r.unverified.size() == 2);  // the dataset files are not on this machine
    for (const char* rule : {"placement_trainer", "placement_engine"}) {
      INFO(rule);
      CHECK(std::any_of(r.rules.begin(), r.rules.end(),
                        [&](const auto& x) { return x.id == rule && x.passed(); }));
    }
    // The reference's placement (docs/benchmark.md §7.1), as the settings say it: the trainer on
    // 16 nodes of 4 GPUs at TP4 x PP2 x EP32 (whole experts over tp x ep ranks of a stage), the
    // engines TP8 x EP8 groups (whole experts over the group's 8 ranks) on the other 48 nodes.
    auto setting = [&](mlpt_component_kind kind, const char* key) {
      for (const auto& c : config.components)
        if (c.kind == kind) return c.settings.value(key, int64_t{1});
      return int64_t{0};
    };
    const int64_t tp = setting(MLPT_COMPONENT_TRAINER, "tensor_parallel"),
                  ep = setting(MLPT_COMPONENT_TRAINER, "expert_parallel"),
                  pp = setting(MLPT_COMPONENT_TRAINER, "pipeline_parallel");
    CHECK(tp == 4);
    CHECK(pp == 2);
    CHECK(setting(MLPT_COMPONENT_TRAINER, "expert_tensor_parallel") == 1);
    CHECK(tp * ep == 32);
    CHECK(config.placement.trainer_ranks == 16 * 4);
    CHECK(config.placement.trainer_ranks % (tp * ep * pp) == 0);
    CHECK(setting(MLPT_COMPONENT_ENGINE, "tensor_parallel") == 8);
    CHECK(setting(MLPT_COMPONENT_ENGINE, "pipeline_parallel") == 1);
    CHECK(setting(MLPT_COMPONENT_ENGINE, "expert_tensor_parallel") == 1);
    CHECK(config.placement.engine_ranks == 8);
    CHECK(48 * 4 % config.placement.engine_ranks == 0);  // whole engine groups on the generating nodes
  }
}

TEST_CASE("impossible run-config values are errors naming file, line and key") {
  CHECK_THROWS_WITH(check_text(with_benchmark("global_batch_size = 100")),
                    Catch::Contains(":") && Catch::Contains("'benchmark.global_batch_size'") &&
                        Catch::Contains("must equal"));
  CHECK_THROWS_WITH(check_text(with_benchmark("max_turns = 0")),
                    Catch::Contains("'benchmark.max_turns': must be > 0"));
  CHECK_THROWS_WITH(check_text(with_benchmark("training_top_p = 1.5")),
                    Catch::Contains("'benchmark.training_top_p': must be in (0, 1]"));
  CHECK_THROWS_WITH(check_text(with_benchmark("max_turn = 30")),
                    Catch::Contains("unknown key 'benchmark.max_turn'"));
  CHECK_THROWS_WITH(check_text(with_benchmark("max_turns = \"30\"")), Catch::Contains("must be an integer"));
}

TEST_CASE(
    "a missing plugin, or one without the component named, fails check config with file, line and table") {
  setenv("MLPT_PLUGIN_PATH", MLPT_PLUGIN_DIR, 1);
  std::string text = std::regex_replace(base_config(), std::regex("plugin = \"x.so\""),
                                        "plugin = \"libmlpt_task_letters.so\"");
  text = std::regex_replace(text, std::regex("\\[components.trainer\\]\nplugin = \"[^\"]*\""),
                            "[components.trainer]\nplugin = \"libmlpt_reference.so\"\nname = \"qwen35_cpu\"");
  text = std::regex_replace(text, std::regex("\\[components.engine\\]\nplugin = \"[^\"]*\""),
                            "[components.engine]\nplugin = \"libmlpt_reference.so\"\nname = \"qwen35_cpu\"");
  text = std::regex_replace(text, std::regex("\\[components.transport\\]\nplugin = \"[^\"]*\""),
                            "[components.transport]\nplugin = \"libmlpt_transport_inprocess.so\"");
  auto path = std::filesystem::temp_directory_path() /
              ("mlpt_check_config_plugins." + std::to_string(::getpid()) + ".toml");
  std::ofstream(path) << text;
  auto good = check::check_config(run::read_run_config(path));
  INFO(check::format_report(good));
  for (const char* id :
       {"plugin_trainer", "plugin_engine", "plugin_transport", "plugin_harness", "plugin_reward"}) {
    auto it = std::find_if(good.rules.begin(), good.rules.end(), [&](const auto& r) { return r.id == id; });
    REQUIRE(it != good.rules.end());
    CHECK(it->passed());
  }
  // A misspelled plugin file, and a plugin that does not provide the kind asked for.
  std::ofstream(path) << std::regex_replace(text, std::regex("libmlpt_transport_inprocess.so"),
                                            "libmlpt_transport_inprocss.so");
  auto missing = check::check_config(run::read_run_config(path));
  CHECK_FALSE(missing.compliant());
  CHECK(failed(missing) == std::vector<std::string>{"plugin_transport"});
  const std::string text_report = check::format_report(missing);
  CHECK_THAT(text_report, Catch::Contains("libmlpt_transport_inprocss.so"));
  CHECK_THAT(text_report, Catch::Contains("[components.transport]"));
  CHECK_THAT(text_report, Catch::Contains(path.string() + ":"));
  std::ofstream(path) << std::regex_replace(text, std::regex("libmlpt_transport_inprocess.so"),
                                            "libmlpt_task_letters.so");
  auto wrong = check::check_config(run::read_run_config(path));
  CHECK(failed(wrong) == std::vector<std::string>{"plugin_transport"});
}
