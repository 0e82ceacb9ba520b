// The harness's turn logic over a host git repository: first messages, the continue nudge, error
// observations for garbled, unknown and incomplete calls, think, finish, and the patch with the
// untracked-at-start list.
#include <catch2/catch.hpp>

#include "episode.hpp"
#include "host_workspace.hpp"
#include "prompts.hpp"

using agent_env_test::HostWorkspace;
using agent_env_test::TempDir;
using nlohmann::json;

namespace {
struct Repo {
  TempDir dir;
  HostWorkspace ws{dir.path};
  Repo() {
    agent_env_test::write(dir.path / "lib.py", "def f():\n    return 1\n");
    ws.shell("git init -q && git add -A && git -c user.name=t -c user.email=t@t commit -qm init", 60000);
    agent_env_test::write(dir.path / "notes.txt", "untracked at start\n");
    agent_env_test::write(dir.path / "r2e_tests" / "test_hidden.py", "def test_h(): pass\n");
    agent_env_test::write(dir.path / "run_tests.sh", "pytest -rA r2e_tests\n");
  }
  mlpt::openhands::HarnessConfig config() {
    mlpt::openhands::HarnessConfig c;
    c.workspace = dir.str();
    c.state_dir = dir.str() + "/../" + dir.path.filename().string() + "_state";
    return c;
  }
};
json task() { return {{"problem_statement", "f() should return 2"}}; }
json call(const std::string& name, json args) { return {{"name", name}, {"arguments", std::move(args)}}; }
}  // namespace

TEST_CASE("start removes the hidden tests, records untracked files and writes the prompt and tools") {
  Repo repo;
  mlpt::openhands::CodeActEpisode ep(repo.ws, repo.config());
  json start = ep.start(task());
  CHECK_FALSE(std::filesystem::exists(repo.dir.path / "r2e_tests"));
  CHECK_FALSE(std::filesystem::exists(repo.dir.path / "run_tests.sh"));
  REQUIRE(start["messages"].size() == 2);
  CHECK(start["messages"][0]["role"] == "system");
  const std::string user = start["messages"][1]["content"];
  CHECK(user.rfind("<uploaded_files>\n" + repo.dir.str() + "\n</uploaded_files>\n", 0) == 0);
  CHECK(user.find("<issue_description>\nf() should return 2\n</issue_description>") != std::string::npos);
  for (const char* phase : {"READING", "RUNNING", "EXPLORATION", "TEST CREATION", "FIX ANALYSIS", "FIX IMPLEMENTATION",
                            "VERIFICATION", "FINAL REVIEW"})
    CHECK(user.find(phase) != std::string::npos);
  std::vector<std::string> names;
  for (const auto& t : start["tools"]) names.push_back(t["function"]["name"]);
  CHECK(names == std::vector<std::string>{"execute_bash", "str_replace_editor", "think", "finish"});
  CHECK(start["tools"][0]["function"]["parameters"]["required"] == json({"command", "security_risk"}));
  CHECK(start["tools"][1]["function"]["parameters"]["required"] == json({"command", "path", "security_risk"}));
  auto result = ep.finish("max_turns");
  CHECK(result["untracked_at_start"] == json({"notes.txt"}));
  // Untracked files enter the patch (git add -A); the grader excludes them by this list.
  CHECK(std::string(result["patch"]).find("diff --git a/notes.txt b/notes.txt") == 0);
  CHECK(std::string(result["patch"]).find("lib.py") == std::string::npos);
  std::filesystem::remove_all(repo.config().state_dir);
}

TEST_CASE("replies without calls get the nudge; bad calls get observations the model can act on") {
  Repo repo;
  mlpt::openhands::CodeActEpisode ep(repo.ws, repo.config());
  ep.start(task());
  json nudge = ep.step({{"content", "I will think about it."}, {"tool_calls", json::array()}});
  CHECK(nudge["done"] == false);
  CHECK(nudge["messages"][0]["role"] == "user");
  CHECK(nudge["messages"][0]["content"] == mlpt::openhands::continue_message(0));
  const std::string text = nudge["messages"][0]["content"];
  CHECK(text.rfind("Please continue working on the task on whatever approach you think is suitable.\n", 0) == 0);
  CHECK(text.find("finish tool") != std::string::npos);
  CHECK(text.find("IMPORTANT: YOU SHOULD NEVER ASK FOR HUMAN HELP.") != std::string::npos);
  json second = ep.step({{"content", "hmm"}});
  CHECK(std::string(second["messages"][0]["content"]).find("If you want to give up") != std::string::npos);

  json garbled = ep.step({{"content", ""}, {"tool_calls", json::array()}, {"parse_errors", {"unterminated <tool_call>"}}});
  CHECK(garbled["messages"][0]["content"] == "ERROR: unterminated <tool_call>\nPlease check the format of your tool call and retry.");
  json unknown = ep.step({{"tool_calls", {call("browse", {{"url", "x"}})}}});
  CHECK(unknown["messages"][0]["content"] ==
        "Tool browse is not registered. (arguments: {\"url\":\"x\"}). Please check the tool name and retry with an existing tool.");
  json missing = ep.step({{"tool_calls", {call("str_replace_editor", {{"command", "view"}})}}});
  CHECK(missing["messages"][0]["content"] == "Missing required argument \"path\" in tool call str_replace_editor");
  json bad_args = ep.step({{"tool_calls", {call("execute_bash", "{not json")}}});
  CHECK(bad_args["messages"][0]["content"] == "Failed to parse tool call arguments: {not json");
  json think = ep.step({{"tool_calls", {call("think", {{"thought", "f returns 1"}})}}});
  CHECK(think["messages"][0]["content"] == "Your thought has been logged.");
  CHECK(think["messages"][0]["role"] == "tool");
  CHECK(think["messages"][0]["name"] == "think");
  std::filesystem::remove_all(repo.config().state_dir);
}

TEST_CASE("an edit then finish ends the episode and the patch holds the edit but not the binary file") {
  Repo repo;
  mlpt::openhands::CodeActEpisode ep(repo.ws, repo.config());
  ep.start(task());
  const std::string lib = repo.dir.str() + "/lib.py";
  json edit = ep.step({{"tool_calls", {call("str_replace_editor", {{"command", "str_replace"}, {"path", lib},
                                                                    {"old_str", "return 1"}, {"new_str", "return 2"},
                                                                    {"security_risk", "LOW"}})}}});
  CHECK(std::string(edit["messages"][0]["content"]).rfind("The file " + lib + " has been edited.", 0) == 0);
  agent_env_test::write(repo.dir.path / "blob.bin", std::string("\0\1\2", 3));
  json done = ep.step({{"tool_calls", {call("finish", {{"message", "fixed"}}), call("think", {{"thought", "after"}})}}});
  CHECK(done["done"] == true);
  CHECK(done["messages"].empty());
  json result = ep.finish("finished");
  const std::string patch = result["patch"];
  CHECK(patch.find("-    return 1\n+    return 2\n") != std::string::npos);
  CHECK(patch.find("blob.bin") == std::string::npos);
  CHECK(patch.find("notes.txt") != std::string::npos);  // in the patch; the grader excludes it
  CHECK(result["answer"] == "fixed");
  std::filesystem::remove_all(repo.config().state_dir);
}

TEST_CASE("harness config rejects unknown keys") {
  CHECK_THROWS_WITH(mlpt::openhands::HarnessConfig::from_json(R"({"soft_timeout": 3})"),
                    Catch::Contains("unknown config key \"soft_timeout\""));
  CHECK(mlpt::openhands::HarnessConfig::from_json(R"({"soft_timeout_s": 3})").bash.soft_timeout_s == 3);
}
