// The loader's contract: what loads, what is refused, and that every refusal says what and where.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include "core/plugin/plugin.hpp"
#include "mlpt/reward.h"

using mlpt::plugin::HostServices;
using mlpt::plugin::Plugin;

namespace {

std::filesystem::path variant(int defect) {
  return std::filesystem::path(MLPT_VARIANTS_DIR) / ("libc_plugin_" + std::to_string(defect) + ".so");
}

// Loads `path` expecting failure; returns the message.
std::string load_error(const std::filesystem::path& path, mlpt_error_code* code = nullptr) {
  HostServices host;
  try {
    Plugin::load(path, host);
  } catch (const mlpt::Error& e) {
    if (code) *code = e.code();
    return e.what();
  }
  FAIL("loading " << path << " was expected to fail");
  return {};
}

}  // namespace

TEST_CASE("a correct plain-C plugin loads and its component works through the C table") {
  HostServices host;
  auto plugin = Plugin::load(variant(0), host);
  CHECK(plugin->name() == "c-plugin");
  CHECK(plugin->version() == "1.0.0");
  CHECK(plugin->notes().empty());
  CHECK(plugin->build_info() == "plain C11");
  auto reward = plugin->component(MLPT_COMPONENT_REWARD);
  CHECK(reward.name == "nonempty_patch");
  auto* api = reward.table<mlpt_reward_api>();

  mlpt_reward_create_args create{MLPT_REWARD_CREATE_ARGS_STRUCT_SIZE, {"{}", 2}, nullptr};
  mlpt::plugin::check(reward, api->create(&create), "create");
  REQUIRE(create.reward != nullptr);
  std::string with_patch = R"({"patch": "diff --git a/x b/x"})", empty_patch = R"({"patch": ""})";
  mlpt_grade_args grade{};
  grade.struct_size = MLPT_GRADE_ARGS_STRUCT_SIZE;
  grade.reward = create.reward;
  grade.result_json = {with_patch.data(), with_patch.size()};
  mlpt::plugin::check(reward, api->grade(&grade), "grade");
  CHECK(grade.out_reward == 1.0);
  grade.result_json = {empty_patch.data(), empty_patch.size()};
  mlpt::plugin::check(reward, api->grade(&grade), "grade");
  CHECK(grade.out_reward == 0.0);

  // A component error crosses as an error object and becomes mlpt::Error with code and message.
  mlpt_reward_create_args bad{MLPT_REWARD_CREATE_ARGS_STRUCT_SIZE, {"{\"x\": 1}", 8}, nullptr};
  try {
    mlpt::plugin::check(reward, api->create(&bad), "create");
    FAIL("create with settings should fail");
  } catch (const mlpt::Error& e) {
    CHECK(e.code() == MLPT_INVALID_ARGUMENT);
    CHECK_THAT(e.what(), Catch::Contains("nonempty_patch takes no settings"));
  }
  api->destroy(create.reward);
}

TEST_CASE("a missing file, a non-ELF file and a directory are refused plainly") {
  auto dir = std::filesystem::temp_directory_path() / "mlpt_loader_test";
  std::filesystem::create_directories(dir);
  mlpt_error_code code{};
  CHECK_THAT(load_error(dir / "does_not_exist.so", &code), Catch::Contains("file does not exist"));
  CHECK(code == MLPT_NOT_FOUND);
  std::ofstream(dir / "text.so") << "this is not a shared object\n";
  CHECK_THAT(load_error(dir / "text.so"), Catch::Contains("not a shared object"));
  CHECK_THAT(load_error(dir), Catch::Contains("not a regular file"));
  // An ELF file that is not a loadable library (truncated copy of a real plugin).
  {
    std::ifstream in(variant(0), std::ios::binary);
    std::string head(512, '\0');
    in.read(head.data(), 512);
    std::ofstream(dir / "truncated.so", std::ios::binary) << head;
  }
  CHECK_THAT(load_error(dir / "truncated.so"), Catch::Contains("dlopen failed"));
  std::filesystem::remove_all(dir);
}

TEST_CASE("the loader names each defect of a broken plugin") {
  mlpt_error_code code{};
  SECTION("no entry symbol") {
    CHECK_THAT(load_error(variant(1), &code), Catch::Contains("no entry point 'mlpt_plugin_init'"));
    CHECK(code == MLPT_NOT_FOUND);
  }
  SECTION("ABI major mismatch") {
    auto m = load_error(variant(2), &code);
    CHECK_THAT(m, Catch::Contains("built for ABI 2.0") && Catch::Contains("major mismatch"));
    CHECK(code == MLPT_FAILED_PRECONDITION);
  }
  SECTION("a required function missing") {
    CHECK_THAT(load_error(variant(4)), Catch::Contains("component 'nonempty_patch'") &&
                                           Catch::Contains("required function(s) not set: grade"));
  }
  SECTION("two components with one name") {
    CHECK_THAT(load_error(variant(5), &code), Catch::Contains("component 'dup'") && Catch::Contains("two components of one kind have this name"));
    CHECK(code == MLPT_ALREADY_EXISTS);
  }
  SECTION("the plugin refuses the host and says why") {
    CHECK_THAT(load_error(variant(6)), Catch::Contains("refused to load") && Catch::Contains("needs a host with GPUs"));
  }
  SECTION("a descriptor smaller than ABI 1.0's") {
    CHECK_THAT(load_error(variant(7)), Catch::Contains("descriptor struct_size 8 is smaller than ABI 1.0's"));
  }
  SECTION("the entry point returns an error") {
    auto m = load_error(variant(8), &code);
    CHECK_THAT(m, Catch::Contains("entry point failed") && Catch::Contains("license server unreachable"));
    CHECK(code == MLPT_UNAVAILABLE);
  }
  SECTION("implausible capability record") {
    CHECK_THAT(load_error(variant(10)), Catch::Contains("capabilities struct_size 0 is implausible"));
  }
  SECTION("no function table") {
    CHECK_THAT(load_error(variant(11)), Catch::Contains("api table is NULL"));
  }
  SECTION("an unresolved symbol fails at load time, not at first call") {
    CHECK_THAT(load_error(variant(12)), Catch::Contains("dlopen failed") &&
                                            Catch::Contains("mlpt_test_symbol_nobody_defines"));
  }
}

TEST_CASE("minor versions: newer loads with a note, older 1.0 layout loads without new fields") {
  HostServices host;
  auto newer = Plugin::load(variant(3), host);
  REQUIRE(newer->notes().size() == 1);
  CHECK_THAT(newer->notes()[0], Catch::Contains("built for ABI 1.99") && Catch::Contains("it loads"));
  CHECK(newer->component(MLPT_COMPONENT_REWARD).name == "nonempty_patch");

  // A plugin compiled against 1.0: its descriptor ends before build_info (added in 1.1). The host
  // must accept it and must not read the field it does not have.
  auto older = Plugin::load(variant(9), host);
  CHECK(older->abi_version().major == 1);
  CHECK(older->abi_version().minor == 0);
  CHECK(older->notes().empty());
  CHECK(older->build_info().empty());
  CHECK(older->component(MLPT_COMPONENT_REWARD).name == "nonempty_patch");
}

TEST_CASE("component lookup by kind and name explains what exists") {
  HostServices host;
  auto plugin = Plugin::load(variant(0), host);
  CHECK_THAT([&] {
    try { plugin->component(MLPT_COMPONENT_ENGINE); } catch (const mlpt::Error& e) { return std::string(e.what()); }
    return std::string();
  }(), Catch::Contains("has no engine component"));
  CHECK_THAT([&] {
    try { plugin->component(MLPT_COMPONENT_REWARD, "other"); } catch (const mlpt::Error& e) { return std::string(e.what()); }
    return std::string();
  }(), Catch::Contains("no reward component 'other' (it has: nonempty_patch)"));
  CHECK(mlpt::plugin::kind_from_name("sandbox") == MLPT_COMPONENT_SANDBOX);
  CHECK_THROWS_WITH(mlpt::plugin::kind_from_name("gpu"), Catch::Contains("unknown component kind 'gpu'"));
}

TEST_CASE("a component outlives its plugin handle: the shared object stays mapped while used") {
  HostServices host;
  mlpt::plugin::Component reward;
  {
    auto plugin = Plugin::load(variant(0), host);
    reward = plugin->component(MLPT_COMPONENT_REWARD);
  }
  // The Component holds the plugin; its table must still be callable.
  mlpt_reward_create_args create{MLPT_REWARD_CREATE_ARGS_STRUCT_SIZE, {"", 0}, nullptr};
  mlpt::plugin::check(reward, reward.table<mlpt_reward_api>()->create(&create), "create");
  reward.table<mlpt_reward_api>()->destroy(create.reward);
}
