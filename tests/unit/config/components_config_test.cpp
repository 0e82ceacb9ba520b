// Strict TOML configs: components resolve to loaded plugins; every mistake names file, line and key.
#include <unistd.h>

#include <catch2/catch.hpp>

#include <fstream>

#include "core/components/instances.hpp"
#include "core/config/components_config.hpp"
#include "core/plugin/component_set.hpp"

using namespace mlpt;

namespace {

std::string write_config(const std::string& name, const std::string& text) {
  auto dir = std::filesystem::temp_directory_path() / ("mlpt_config_test." + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  auto path = (dir / name).string();
  std::ofstream(path) << text;
  return path;
}

std::vector<config::ComponentConfig> read(const std::string& path) {
  auto table = config::TomlTable::parse_file(path);
  config::TomlTable root(table, path);
  auto components = config::read_components(root);
  root.finish();
  return components;
}

std::string error_of(const std::string& text) {
  auto path = write_config("bad.toml", text);
  try {
    auto configs = read(path);
    plugin::HostServices host;
    plugin::ComponentSet set(configs, host);
  } catch (const Error& e) {
    return e.what();
  }
  FAIL("config was expected to be rejected:\n" << text);
  return {};
}

}  // namespace

TEST_CASE("a config names plugins per component and passes settings as JSON") {
  auto path = write_config("good.toml", R"(
[components.reward]
plugin = ")" MLPT_PLUGIN_DIR R"(/libmlpt_example.so"
name = "exact_answer"
[components.reward.settings]
threshold = 0.5
tags = ["a", "b"]
nested = { depth = 2 }
)");
  auto configs = read(path);
  REQUIRE(configs.size() == 1);
  CHECK(configs[0].kind == MLPT_COMPONENT_REWARD);
  CHECK(configs[0].settings == nlohmann::json::parse(R"({"threshold": 0.5, "tags": ["a", "b"], "nested": {"depth": 2}})"));
  plugin::HostServices host;
  plugin::ComponentSet set(configs, host);
  CHECK(set.component(MLPT_COMPONENT_REWARD).name == "exact_answer");
  CHECK(set.plugins().size() == 1);
  CHECK_THROWS_WITH(set.component(MLPT_COMPONENT_ENGINE), Catch::Contains("no [components.engine] table"));
}

TEST_CASE("config mistakes are named with file, line and key") {
  CHECK_THAT(error_of("[components.gpu]\nplugin = \"x.so\"\n"),
             Catch::Contains("bad.toml:1:") && Catch::Contains("'components.gpu'") && Catch::Contains("unknown component kind 'gpu'"));
  CHECK_THAT(error_of("[components.reward]\nplugin = \"x.so\"\nplgin = \"typo\"\n"),
             Catch::Contains("bad.toml:3:") && Catch::Contains("unknown key 'components.reward.plgin'"));
  CHECK_THAT(error_of("[components.reward]\nname = \"exact_answer\"\n"),
             Catch::Contains("'components.reward.plugin'") && Catch::Contains("is required"));
  CHECK_THAT(error_of("[components.reward]\nplugin = 3\n"),
             Catch::Contains("bad.toml:2:") && Catch::Contains("must be a string"));
  CHECK_THAT(error_of("[components.reward]\nplugin = \"libnothing.so\"\n"),
             Catch::Contains("[components.reward]") && Catch::Contains("plugin 'libnothing.so' not found"));
  CHECK_THAT(error_of("[components.reward]\nplugin = \"" MLPT_PLUGIN_DIR "/libmlpt_example.so\"\nname = \"other\"\n"),
             Catch::Contains("no reward component 'other' (it has: exact_answer)"));
  CHECK_THAT(error_of("[components.engine]\nplugin = \"" MLPT_PLUGIN_DIR "/libmlpt_example.so\"\n"),
             Catch::Contains("has no engine component"));
  CHECK_THAT(error_of("[components\nplugin = 1\n"), Catch::Contains("bad.toml:1:") && Catch::Contains("TOML syntax error"));
  CHECK_THAT(error_of("[unknown_section]\n"), Catch::Contains("unknown key 'unknown_section'"));
}

TEST_CASE("a plugin's settings error names the setting's file, line and key in the config") {
  // The example reward takes no settings: its SDK settings reader refuses the key, and the host puts
  // the key's place in the config in front.
  auto path = write_config("settings.toml", R"([components.reward]
plugin = ")" MLPT_PLUGIN_DIR R"(/libmlpt_example.so"
[components.reward.settings]
threshold = 0.5
)");
  auto configs = read(path);
  plugin::HostServices host;
  plugin::ComponentSet set(configs, host);
  try {
    set.create(MLPT_COMPONENT_REWARD, [&] {
      return components::Reward(set.component(MLPT_COMPONENT_REWARD), set.settings(MLPT_COMPONENT_REWARD));
    });
    FAIL("an unknown setting must be refused at load");
  } catch (const Error& e) {
    CHECK(e.code() == MLPT_INVALID_ARGUMENT);
    CHECK_THAT(e.what(), Catch::Contains(path + ":4:") && Catch::Contains("'components.reward.settings.threshold'") &&
                             Catch::Contains("unknown key 'threshold'"));
  }
  // Nested keys are found by their full path; a message naming no setting is left as it is.
  config::ComponentConfig c = configs[0];
  c.settings_where = {{"optimizer", "f.toml:2:1: 'components.trainer.settings.optimizer'"},
                      {"optimizer.lr", "f.toml:3:1: 'components.trainer.settings.optimizer.lr'"}};
  CHECK(config::locate_settings_error(c, "trainer x settings: optimizer.lr: must be in [0, 1], got 2") ==
        "f.toml:3:1: 'components.trainer.settings.optimizer.lr': trainer x settings: optimizer.lr: must be in [0, 1], got 2");
  CHECK(config::locate_settings_error(c, "checkpoint not found") == "checkpoint not found");
}
