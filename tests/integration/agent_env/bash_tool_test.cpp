// execute_bash: observation format, truncation, and the session semantics of the driver (on the
// host, so timings stay small: the soft timeout is set to 1 s here).
#include <catch2/catch.hpp>

#include "bash_tool.hpp"
#include "host_workspace.hpp"

using agent_env_test::HostWorkspace;
using agent_env_test::TempDir;
using mlpt::openhands::BashTool;
using mlpt::openhands::DriverReport;
using nlohmann::json;

TEST_CASE("observations carry the completion, working directory and exit code lines") {
  DriverReport r{"done", 0, "/testbed", "", "hello\n\n"};
  CHECK(mlpt::openhands::format_observation(r, "", "echo hello", "", "") ==
        "hello\n[The command completed with exit code 0.]\n[Current working directory: /testbed]\n"
        "[Command finished with exit code 0]");
  DriverReport soft{"soft", -1, "/testbed", "/usr/bin/python", "partial"};
  CHECK(mlpt::openhands::format_observation(soft, "", "sleep 99", "10", "") ==
        "partial\n[The command has no new output after 10 seconds. You may wait longer to see additional output by "
        "sending empty command '', send other commands to interact with the current process, send keys (\"C-c\", "
        "\"C-z\", \"C-d\") to interrupt/kill the previous command before sending your new command, or use the timeout "
        "parameter in execute_bash for future commands.]\n"
        "[Current working directory: /testbed]\n[Python interpreter: /usr/bin/python]");
  DriverReport hard{"hard", -1, "/testbed", "", ""};
  CHECK(mlpt::openhands::format_observation(hard, "", "x", "2.5", "").rfind("\n[The command timed out after 2.5 seconds. ", 0) == 0);
  // OpenHands' current TIMEOUT_MESSAGE_TEMPLATE (runtime/utils/bash_constants.py), word for word.
  CHECK(std::string(mlpt::openhands::kTimeoutMessageTemplate) ==
        "You may wait longer to see additional output by sending empty command '', send other commands to "
        "interact with the "
        "current process, send keys (\"C-c\", \"C-z\", \"C-d\") to interrupt/kill the previous command "
        "before sending your new "
        "command, or use the timeout parameter in execute_bash for future commands.");
  CHECK(mlpt::openhands::python_number(json(30)) == "30");
  CHECK(mlpt::openhands::python_number(json(30.0)) == "30.0");
  CHECK(mlpt::openhands::python_number(json(2.5)) == "2.5");
}

TEST_CASE("observations over 30000 characters keep the first and last halves around the marker") {
  std::string text = std::string(20000, 'a') + std::string(20000, 'b');
  std::string out = mlpt::openhands::truncate_observation(text, 30000);
  CHECK(out == std::string(15000, 'a') + "\n[... Observation truncated due to length ...]\n" + std::string(15000, 'b'));
  CHECK(mlpt::openhands::truncate_observation("short", 30000) == "short");
  // Characters, not bytes: 20000 two-byte letters are within the limit.
  std::string wide;
  for (int i = 0; i < 20000; ++i) wide += "\xC3\xA9";
  CHECK(mlpt::openhands::truncate_observation(wide, 30000) == wide);
  std::string cut = mlpt::openhands::truncate_observation(wide + wide, 30000);
  CHECK(cut.size() == 30000 * 2 + std::string("\n[... Observation truncated due to length ...]\n").size());
}

namespace {
struct Session {
  TempDir dir;
  HostWorkspace ws{dir.path};
  BashTool bash;
  explicit Session(double soft_s = 1, double max_s = 20)
      : bash(ws, dir.str() + "/.state", {soft_s, max_s, 30000}, dir.str()) {
    bash.install();
  }
  std::string run(json args) { return bash.run(args); }
};
}  // namespace

TEST_CASE("the working directory and exported variables persist between commands") {
  Session s;
  std::filesystem::create_directories(s.dir.path / "sub");
  std::string first = s.run({{"command", "cd sub && export FOO=bar && echo set"}});
  // (A "[Python interpreter: ...]" line sits between the two when `python` is on PATH.)
  CHECK(first.rfind("set\n[The command completed with exit code 0.]\n[Current working directory: " + s.dir.str() + "/sub]\n", 0) == 0);
  CHECK(first.substr(first.size() - 36) == "\n[Command finished with exit code 0]");
  std::string second = s.run({{"command", "echo $FOO; pwd"}});
  CHECK(second.rfind("bar\n" + s.dir.str() + "/sub\n[The command completed with exit code 0.]", 0) == 0);
  std::string failing = s.run({{"command", "ls /nonexistent_dir_mlpt >/dev/null 2>&1; exit 3"}});
  CHECK(failing.find("[Command finished with exit code 3]") != std::string::npos);
}

TEST_CASE("a silent command returns at the soft timeout, keeps running, and its output can be fetched") {
  Session s(1);
  std::string first = s.run({{"command", "echo start; sleep 4; echo end"}});
  CHECK(first.rfind("start\n[The command has no new output after 1 seconds. ", 0) == 0);
  CHECK(first.find("[Command finished") == std::string::npos);
  std::string busy = s.run({{"command", "echo other"}});
  CHECK(busy.rfind("[Below is the output of the previous command.]\n", 0) == 0);
  CHECK(busy.find("[Your command \"echo other\" is NOT executed.") != std::string::npos);
  std::string rest, seen = busy;
  for (int i = 0; i < 20 && rest.find("[Command finished") == std::string::npos; ++i) {
    rest = s.run({{"command", ""}, {"is_input", "true"}});
    CHECK(rest.rfind("[Below is the output of the previous command.]\n", 0) == 0);
    seen += rest;
  }
  CHECK(seen.find("]\nend\n[") != std::string::npos);  // "end" shown once the command printed it
  CHECK(seen.find("\nother\n") == std::string::npos);  // the refused command never ran
  CHECK(rest.find("[Command finished with exit code 0]") != std::string::npos);
  CHECK(s.run({{"command", ""}, {"is_input", "true"}}) == "ERROR: No previous running command to retrieve logs from.");
}

TEST_CASE("the timeout parameter is a hard limit and C-c interrupts the command") {
  Session s(5);
  std::string first = s.run({{"command", "while true; do echo tick; sleep 0.2; done"}, {"timeout", 1}});
  CHECK(first.find("[The command timed out after 1 seconds. ") != std::string::npos);
  CHECK(first.find("tick") != std::string::npos);
  std::string stopped = s.run({{"command", "C-c"}, {"is_input", "true"}});
  CHECK(stopped.find("[The command completed with exit code 130. CTRL+C was sent.]") != std::string::npos);
  CHECK(s.run({{"command", "echo after"}}).rfind("after\n", 0) == 0);
}

// Class: the agent replaces what the harness keeps in the sandbox for its shell session. Whatever it
// put there, the next command runs (its output is in the observation) or is answered with an error
// naming what stopped it; it is never dropped.
TEST_CASE("a command after the agent replaced the shell session's helpers is run, never dropped") {
  Session s;
  const std::string state = s.dir.str() + "/.state";
  const std::string completed = "[The command completed with exit code 0.]";
  struct Attack {
    std::string setup;
    bool resets;  // the state folder itself had to be restored
  };
  const std::vector<Attack> attacks = {
      {"rm -rf " + state + " && echo not-a-folder > " + state, true},
      {"rm -rf " + state + " && ln -s /proc " + state, true},
      {"rm -rf " + state + " && ln -s " + s.dir.str() + "/missing " + state, true},
      {"rm -rf " + state + "/cmd && mkdir " + state + "/cmd", true},
      {"for f in out pid done cwd env py shown reported; do rm -rf " + state + "/$f; mkdir -p " + state +
           "/$f/x; done",
       false},
      {"printf 'exit 0\\0' > " + state + "/env", false},
      {"printf '#!/bin/sh\\necho fake\\n' > " + state + "/driver.sh; chmod +x " + state + "/driver.sh",
       false},
      {"chmod 000 " + state + "/cwd", false},
  };
  for (size_t i = 0; i < attacks.size(); ++i) {
    INFO("attack " << i << ": " << attacks[i].setup);
    s.run({{"command", attacks[i].setup}});
    const std::string marker = "still-runs-" + std::to_string(i);
    std::string after = s.run({{"command", "echo " + marker}});
    INFO(after);
    CHECK(after.find(marker + "\n" + completed) != std::string::npos);
    CHECK((after.rfind("[The shell session was reset: ", 0) == 0) == attacks[i].resets);
    // The session works on: the next command needs no restoring.
    CHECK(s.run({{"command", "echo next"}}).rfind("next\n" + completed, 0) == 0);
  }
}

TEST_CASE(
    "a command that replaces the harness's exit trap or removes its state still ends with its exit code") {
  Session s;
  const std::string state = s.dir.str() + "/.state";
  CHECK(s.run({{"command", "trap - EXIT; echo untrapped; exit 4"}})
            .find("untrapped\n[The command completed with exit code 4.]") != std::string::npos);
  CHECK(s.run({{"command", "trap 'echo mine' EXIT; echo replaced"}})
            .find("[The command completed with exit code 0.]") != std::string::npos);
  // Its output file went with the folder, so the observation is empty; it ran to the end all the same.
  CHECK(s.run({{"command", "rm -rf " + state + "; touch removed-own-state"}})
            .find("[The command completed with exit code 0.]") != std::string::npos);
  CHECK(std::filesystem::exists(s.dir.path / "removed-own-state"));
  CHECK(s.run({{"command", "echo after-removal"}})
            .find("after-removal\n[The command completed with exit code 0.]") != std::string::npos);
}

TEST_CASE("a command that cannot be delivered is answered with an error naming why, not dropped") {
  TempDir dir;
  HostWorkspace ws{dir.path};
  // A state folder that can never be made (under /proc): the harness cannot restore it.
  BashTool bash(ws, "/proc/mlpt_no_such_state", {1, 20, 30000}, dir.str());
  std::string answer = bash.run({{"command", "echo never"}});
  CHECK(answer.rfind("ERROR: Your command was not run: the command file could not be written", 0) == 0);
  CHECK(answer.find("/proc/mlpt_no_such_state") != std::string::npos);
  CHECK(answer.find("never\n") == std::string::npos);
}
