// The conformance suite on real plugin combinations: the letters run (trainer, engine, transport,
// harness, reward) and the SWE run (plus the bwrap sandbox, OpenHands harness and R2E reward with
// golden patches and reward hacks) must conform; a reward that scores everything 1 must not, and
// the suite must say which check caught it and why. The SWE run needs scripts/build-task-images.sh.
#include <catch2/catch.hpp>


#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "core/check/conformance.hpp"
#include "core/check/in_process_hacks.hpp"

namespace fs = std::filesystem;
using nlohmann::json;
using mlpt::check::ConformanceCheck;

namespace {

// A bundled config with its relative data paths made absolute (and `from` replaced by `to`),
// written to a temp folder.
fs::path config_copy(const std::string& name, const std::string& from = "", const std::string& to = "") {
  std::ifstream in(fs::path(MLPT_SOURCE_DIR) / "configs" / name);
  std::ostringstream s;
  s << in.rdbuf();
  std::string text = std::regex_replace(s.str(), std::regex("\"\\.\\./tasks/"), "\"" + std::string(MLPT_SOURCE_DIR) + "/tasks/");
  if (!from.empty()) text = std::regex_replace(text, std::regex(from), to);
  fs::path dir = fs::temp_directory_path() / ("mlpt-conformance-" + std::to_string(getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / name) << text;
  return dir / name;
}

mlpt::run::RunConfig load(const std::string& name, const std::string& from = "", const std::string& to = "") {
  setenv("MLPT_CACHE_DIR", MLPT_CACHE_DIR, 1);
  setenv("MLPT_PLUGIN_PATH", MLPT_PLUGIN_DIR, 1);
  return mlpt::run::read_run_config(config_copy(name, from, to));
}

const ConformanceCheck* find(const mlpt::check::ConformanceReport& r, const std::string& component_prefix, const std::string& id) {
  for (const auto& c : r.checks)
    if (c.component.rfind(component_prefix, 0) == 0 && c.id == id) return &c;
  return nullptr;
}

void require_passed(const mlpt::check::ConformanceReport& r, const std::string& component_prefix, const std::string& id) {
  const ConformanceCheck* c = find(r, component_prefix, id);
  INFO(component_prefix << " / " << id);
  REQUIRE(c != nullptr);
  INFO(c->evidence);
  CHECK(c->status == ConformanceCheck::Status::pass);
  CHECK(!c->evidence.empty());
}

int run_cli(const std::string& args, std::string& out) {
  std::string cmd = std::string(MLPT_BIN) + " check plugins " + args + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  int status = pclose(p);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace

TEST_CASE("the letters combination conforms: engine, trainer, transport, harness and reward checks") {
  auto report = mlpt::check::check_plugins(load("tiny.toml"));
  INFO(mlpt::check::format_report(report));
  CHECK(report.passed());
  require_passed(report, "plugins", "load");
  for (const char* id : {"same_seed_same_tokens", "logprobs_returned", "concurrent_requests_complete", "session_reuse", "cancel"}) require_passed(report, "engine", id);
  for (const char* id : {"logprobs_match_engine", "weight_export_complete", "zero_advantage_step_keeps_weights"})
    require_passed(report, "trainer", id);
  require_passed(report, "transport", "round_trip_bitwise");
  require_passed(report, "transport", "versions_monotonic");
  require_passed(report, "transport", "receive_times_out");
  // ABI 1.2: the weights plugin to plugin, the layout a receiver asks for, zero-copy where uncut.
  require_passed(report, "trainer", "weights_flow_plugin_to_plugin");
  require_passed(report, "transport", "wanted_layout_bitwise");
  require_passed(report, "transport", "uncut_tensor_handed_over");
  // Two sender ranks of row shards, a receiver of column shards.
  require_passed(report, "transport", "sender_ranks_wanted_layout");
  // Device readiness concerns device memory: the CPU trainer's export is not applicable, said so.
  const ConformanceCheck* ready = find(report, "trainer", "export_device_ready");
  REQUIRE(ready);
  CHECK(ready->status == ConformanceCheck::Status::not_applicable);
  CHECK_THAT(ready->evidence, Catch::Contains("CPU tensors"));
  require_passed(report, "harness", "start_messages_and_tools");
  require_passed(report, "reward", "empty_result_scores_0");
  // The correct answer of tasks/letters/golden.jsonl scores 1.
  require_passed(report, "reward", "correct_answer_scores_1");
  for (const char* kind : {"trainer", "engine", "transport", "harness", "reward"}) require_passed(report, kind, "null_destroy_is_noop");
  // The checks of the capabilities the reference components declare, and of engine.h's promises.
  for (const char* id : {"routed_experts_recorded", "pause_does_not_nest", "engine_group_all_or_none"}) require_passed(report, "engine", id);
  for (const char* id : {"export_device_matches", "routing_replay_used", "state_save_load_round_trip"}) require_passed(report, "trainer", id);
  require_passed(report, "transport", "declared_reach_consistent");
  require_passed(report, "harness", "episode_without_sandbox");
  for (const char* id : {"grades_without_sandbox", "rewards_binary"}) require_passed(report, "reward", id);
  // Every check the kind lists name (core/plugin/kinds/) was recorded by the suite itself: none was
  // filled in by the coverage pass as unreached or missing.
  for (const auto& c : report.checks) {
    INFO(c.component << " / " << c.id << ": " << c.evidence);
    CHECK(c.evidence.find("not reached") == std::string::npos);
    CHECK(c.evidence.find("recorded by no check") == std::string::npos);
  }
  // Nothing counted as passed that did not run or does not apply: the letters harness has no tools
  // and its results no patch, so those checks are "not applicable", with the reason, in text and JSON.
  const ConformanceCheck* hacks = find(report, "reward", "known_hacks_score_0");
  REQUIRE(hacks);
  CHECK(hacks->status == ConformanceCheck::Status::not_applicable);
  CHECK_THAT(hacks->evidence, Catch::Contains("no patch"));
  const ConformanceCheck* in_process = find(report, "reward", "in_process_hacks_score_0");
  REQUIRE(in_process);
  CHECK(in_process->status == ConformanceCheck::Status::not_applicable);
  const ConformanceCheck* tools = find(report, "harness", "tool_errors_are_observations");
  REQUIRE(tools);
  CHECK(tools->status == ConformanceCheck::Status::not_applicable);
  size_t not_applicable = 0, passed = 0;
  for (const auto& c : report.checks) not_applicable += c.status == ConformanceCheck::Status::not_applicable, passed += c.status == ConformanceCheck::Status::pass;
  const std::string text = mlpt::check::format_report(report);
  CHECK_THAT(text, Catch::Contains("N/A   reward"));
  CHECK_THAT(text, Catch::Contains(std::to_string(passed) + " passed, 0 failed, "));
  CHECK_THAT(text, Catch::Contains(std::to_string(not_applicable) + " not applicable"));
  size_t in_json = 0;
  const json j = mlpt::check::to_json(report);
  for (const auto& c : j["checks"]) in_json += c["status"] == "not_applicable";
  CHECK(in_json == not_applicable);
}

TEST_CASE("with refit = sparse the sparse transport wrapping the run's conforms: full and delta bit for bit, versions, timeout") {
  // configs/tiny.toml with the sparse refit: the in-process transport is checked alone, then wrapped.
  auto config = load("tiny.toml");
  config.run.refit = "sparse";
  auto report = mlpt::check::check_plugins(config);
  INFO(mlpt::check::format_report(report));
  CHECK(report.passed());
  for (const char* id : {"round_trip_bitwise", "delta_round_trip_bitwise", "versions_monotonic", "receive_times_out",
                         "refuses_nothing_to_wrap"})
    require_passed(report, "transport sparse (over inprocess)", id);
  require_passed(report, "transport inprocess", "round_trip_bitwise");
}

#ifdef MLPT_TEST_UCX
TEST_CASE("the UCX transport conforms in one process over loopback: round trip, wanted layout and two sender ranks") {
  // The distributed letters run's combination as shipped: its transport settings say receivers = 2
  // (the run's two rollout workers); the suite checks with the one receiver each check creates, says
  // so, and no send waits for a receiver that never comes (each would time out, failing its check).
  auto report = mlpt::check::check_plugins(load("tiny-distributed.toml"));
  INFO(mlpt::check::format_report(report));
  CHECK(report.passed());
  for (const char* id : {"round_trip_bitwise", "versions_monotonic", "receive_times_out", "wanted_layout_bitwise", "sender_ranks_wanted_layout"})
    require_passed(report, "transport ucx", id);
  require_passed(report, "trainer", "weights_flow_plugin_to_plugin");
  for (const char* id : {"round_trip_bitwise", "sender_ranks_wanted_layout"})
    CHECK_THAT(find(report, "transport ucx", id)->evidence, Catch::Contains("settings receivers = 2") && Catch::Contains("receivers = 1"));
  const ConformanceCheck* handed = find(report, "transport ucx", "uncut_tensor_handed_over");
  REQUIRE(handed);
  CHECK(handed->status == ConformanceCheck::Status::not_applicable);  // zero_copy = 0: receivers hold copies
}
#endif

TEST_CASE("the SWE combination conforms: sandbox isolation, harness tools, golden patch 1, empty and hacks 0") {
  auto report = mlpt::check::check_plugins(load("swe-tiny.toml"));
  INFO(mlpt::check::format_report(report));
  CHECK(report.passed());
  for (const char* id : {"runtime_create", "null_destroy_is_noop", "no_network", "writable_layer_discarded", "timeout_kills_tree",
                         "hidden_tests_not_visible", "not_host_root", "kernel_settings_read_only", "no_capabilities",
                         "seccomp_denies_kernel_interfaces", "read_file_bounded", "clean_environment", "fresh_pid_namespace",
                         "default_workdir_testbed", "output_merged_in_order", "output_limit_truncates", "binary_output_unchanged",
                         "exit_code_of_signal", "files_round_trip", "read_missing_file_not_found", "exec_honours_host_cancellation"})
    require_passed(report, "sandbox", id);
  for (const char* id : {"start_messages_and_tools", "tool_errors_are_observations", "bash_runs_in_sandbox", "finish_ends_episode"})
    require_passed(report, "harness", id);
  for (const char* id : {"empty_result_scores_0", "correct_answer_scores_1", "hack_conftest_forces_pass_scores_0",
                         "hack_runner_replaced_scores_0", "hack_hidden_tests_planted_scores_0",
                         "hack_entry_point_plugin_dist_info_scores_0", "hack_entry_point_plugin_egg_info_scores_0",
                         "hack_huge_patch_preparation_scores_0"})
    require_passed(report, "reward", id);
  // The in-process class: each hack appended to the module the hidden tests import first.
  for (const auto& h : mlpt::check::in_process_hacks("r2e_tests/t.py", {}))
    require_passed(report, "reward", "in_process_" + h.id + "_scores_0");
  // The task image holds no history past the base: the agent cannot reach the fix through git.
  require_passed(report, "task image", "no_history_past_the_base");
  // Limits are checked where the runtime declares them (cgroups may be absent on a machine).
  for (const char* id : {"memory_limit_holds", "process_limit_holds"}) {
    const ConformanceCheck* c = find(report, "sandbox", id);
    REQUIRE(c);
    INFO(id << ": " << c->evidence);
    CHECK(c->status != ConformanceCheck::Status::fail);
  }
}

TEST_CASE("a reward that scores everything 1 does not conform, and the report says which check and why") {
  auto config = load("tiny.toml");
  for (auto& c : config.components)
    if (c.kind == MLPT_COMPONENT_REWARD) c.plugin = MLPT_LENIENT_REWARD, c.name = "always_one", c.settings = json::object();
  auto report = mlpt::check::check_plugins(config);
  INFO(mlpt::check::format_report(report));
  CHECK_FALSE(report.passed());
  const ConformanceCheck* empty = find(report, "reward always_one", "empty_result_scores_0");
  REQUIRE(empty);
  CHECK(empty->status == ConformanceCheck::Status::fail);
  CHECK_THAT(empty->evidence, Catch::Contains("scores 1"));
  // Every other component still conforms: the verdict is this one check.
  for (const auto& c : report.checks)
    if (c.component.rfind("reward", 0) != 0) CHECK(c.status != ConformanceCheck::Status::fail);
  CHECK(mlpt::check::to_json(report)["passed"] == false);
}

TEST_CASE("a reward that trusts the test process's output fails the in-process checks, each with its evidence") {
  auto config = load("swe-tiny.toml");
  for (auto& c : config.components)
    if (c.kind == MLPT_COMPONENT_REWARD) c.settings["witness"] = false;
  auto report = mlpt::check::check_plugins(config);
  INFO(mlpt::check::format_report(report));
  CHECK_FALSE(report.passed());
  require_passed(report, "reward", "correct_answer_scores_1");
  for (const auto& h : mlpt::check::in_process_hacks("r2e_tests/t.py", {})) {
    const ConformanceCheck* c = find(report, "reward", "in_process_" + h.id + "_scores_0");
    REQUIRE(c);
    INFO(h.id << ": " << c->evidence);
    CHECK(c->status == ConformanceCheck::Status::fail);
    CHECK_THAT(c->evidence, Catch::Contains("scores 1"));
  }
}

TEST_CASE("a reward that scores everything 0 does not conform: the correct answer must score 1") {
  auto config = load("tiny.toml");
  for (auto& c : config.components)
    if (c.kind == MLPT_COMPONENT_REWARD) c.plugin = MLPT_LENIENT_REWARD, c.name = "always_zero", c.settings = json::object();
  auto report = mlpt::check::check_plugins(config);
  INFO(mlpt::check::format_report(report));
  CHECK_FALSE(report.passed());
  // It passes what a zero can pass, and fails on the known-correct answer, with the evidence.
  require_passed(report, "reward always_zero", "empty_result_scores_0");
  const ConformanceCheck* correct = find(report, "reward always_zero", "correct_answer_scores_1");
  REQUIRE(correct);
  CHECK(correct->status == ConformanceCheck::Status::fail);
  CHECK_THAT(correct->evidence, Catch::Contains("letters__train-0000") && Catch::Contains("scores 0"));
}

TEST_CASE("a reward with no known-correct answer to grade does not conform, and says what to provide") {
  auto config = load("tiny.toml");
  const fs::path golden = fs::temp_directory_path() / ("mlpt-golden-other-" + std::to_string(getpid()) + ".jsonl");
  std::ofstream(golden) << R"({"instance_id": "some-other-task", "result": {"answer": "x"}})" << "\n";
  auto report = mlpt::check::check_plugins(config, {golden});
  fs::remove(golden);
  const ConformanceCheck* correct = find(report, "reward", "correct_answer_scores_1");
  REQUIRE(correct);
  CHECK(correct->status == ConformanceCheck::Status::fail);
  CHECK_THAT(correct->evidence, Catch::Contains("no known-correct answer for letters__train-0000"));
}

TEST_CASE("mlpt check plugins --golden with a file that does not exist fails and names it") {
  setenv("MLPT_CACHE_DIR", MLPT_CACHE_DIR, 1);
  setenv("MLPT_PLUGIN_PATH", MLPT_PLUGIN_DIR, 1);
  std::string out;
  CHECK(run_cli(config_copy("tiny.toml").string() + " --golden /nonexistent/golden.jsonl", out) == 2);
  CHECK_THAT(out, Catch::Contains("/nonexistent/golden.jsonl") && Catch::Contains("no such file"));
}

TEST_CASE("mlpt check plugins: the exit status is the verdict and --json is machine readable") {
  setenv("MLPT_CACHE_DIR", MLPT_CACHE_DIR, 1);
  setenv("MLPT_PLUGIN_PATH", MLPT_PLUGIN_DIR, 1);
  std::string out;
  CHECK(run_cli(config_copy("tiny.toml").string() + " --json", out) == 0);
  json j = json::parse(out);
  CHECK(j["passed"] == true);
  CHECK(j["checks"].size() >= 10);
  out.clear();
  CHECK(run_cli("/nonexistent/run.toml", out) != 0);
  CHECK_THAT(out, Catch::Contains("/nonexistent/run.toml"));
}
