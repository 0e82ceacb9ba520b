// Several commands in one execute_bash call: cut where OpenHands cuts them (its recorded splits),
// and answered with its error observation, nothing run.
#include "bash_split.hpp"

#include <catch2/catch.hpp>
#include <filesystem>

#include "episode.hpp"
#include "host_workspace.hpp"

using agent_env_test::HostWorkspace;
using agent_env_test::TempDir;
using nlohmann::json;

TEST_CASE("execute_bash commands are cut as OpenHands cuts them (its recorded splits)") {
  // fixtures/bash_split_upstream.json: OpenHands' split_bash_commands over bashlex 0.18 (the version it
  // pins), run on each command: realistic agent commands, upstream's own test inputs, and the syntax
  // its parser gives up on (the call then runs whole).
  const json recorded = json::parse(agent_env_test::read(
      std::string(MLPT_SOURCE_DIR) + "/tests/integration/agent_env/fixtures/bash_split_upstream.json"));
  REQUIRE(recorded["cases"].size() > 100);
  size_t several = 0;
  for (const auto& c : recorded["cases"]) {
    const std::string command = c["command"];
    INFO(command);
    CHECK(mlpt::openhands::split_bash_commands(command) == c["commands"].get<std::vector<std::string>>());
    several += c["commands"].size() > 1;
  }
  CHECK(several > 50);  // both verdicts are exercised
  CHECK(mlpt::openhands::split_bash_commands("") == std::vector<std::string>{""});
}

TEST_CASE("several commands in one execute_bash call run nothing and get OpenHands' error observation") {
  TempDir dir;
  HostWorkspace ws{dir.path};
  ws.shell("git init -q && git -c user.name=t -c user.email=t@t commit -q --allow-empty -m init", 60000);
  mlpt::openhands::HarnessConfig config;
  config.workspace = dir.str();
  config.state_dir = dir.str() + "/../" + dir.path.filename().string() + "_state";
  mlpt::openhands::CodeActEpisode ep(ws, config);
  ep.start({{"problem_statement", "p"}});
  const std::string a = dir.str() + "/a", b = dir.str() + "/b";
  json out = ep.step(
      {{"content", ""},
       {"tool_calls", json::array({{{"name", "execute_bash"},
                                    {"arguments", {{"command", "touch " + a + "\ntouch " + b + "\n"}}}}})}});
  REQUIRE(out["messages"].size() == 1);
  CHECK(out["messages"][0]["role"] == "tool");
  CHECK(out["messages"][0]["content"] ==
        "ERROR: Cannot execute multiple commands at once.\nPlease run each command separately OR chain them "
        "into a "
        "single command via && or ;\nProvided commands:\n(1) touch " +
            a + "\n(2) touch " + b + "\n[Error occurred in processing last action]");
  CHECK_FALSE(std::filesystem::exists(a));
  CHECK_FALSE(std::filesystem::exists(b));
  // One command over several lines (a heredoc, a chain) runs.
  out = ep.step(
      {{"content", ""},
       {"tool_calls", json::array({{{"name", "execute_bash"},
                                    {"arguments", {{"command", "cat > " + a + " <<EOF\nx\nEOF"}}}}})}});
  CHECK(out["messages"][0]["content"].get<std::string>().find("[Command finished with exit code 0]") !=
        std::string::npos);
  CHECK(agent_env_test::read(a) == "x\n");
  CHECK(ep.finish("finish")["tool_errors"] == 1);
}
