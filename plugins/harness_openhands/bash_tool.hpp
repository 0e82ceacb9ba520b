// The `execute_bash` tool over one-shot sandbox execs. A small driver script sent with every call
// (its state folder in the sandbox: command, output file, cwd, exported environment, exit code) gives the OpenHands
// session semantics: the working directory and exported variables persist between calls, a
// command that prints nothing new for the soft timeout (10 s) returns with exit code -1 and keeps
// running, `timeout` sets a hard limit instead, an empty command with is_input fetches more output,
// C-c / C-d / C-z / C-\ signal the running command. Observations are formatted as OpenHands does.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "workspace.hpp"

namespace mlpt::openhands {

struct BashLimits {
  double soft_timeout_s = 10;   // no new output for this long -> return, command keeps running
  double max_command_s = 300;   // the per-command limit (COMMAND_EXEC_TIMEOUT); caps `timeout`, told to the model
  size_t max_observation_chars = 30000;
};

// What the driver reports after each call.
struct DriverReport {
  std::string status;  // done | soft | hard | cap | busy | none | nocmd | lost
  int exit_code = -1;
  std::string cwd, python, output;
  bool started = false;  // run mode: the driver started the command
};

class BashTool {
 public:
  BashTool(Workspace& workspace, std::string state_dir, BashLimits limits = {}, std::string start_dir = "/testbed")
      : ws_(workspace), dir_(std::move(state_dir)), limits_(limits), start_dir_(std::move(start_dir)) {}
  // Makes the state folder (once per episode, before the first call).
  void install();
  // The same as one shell command (so the episode can fold it into its first exec).
  std::string install_command() const;
  // The per-command limit of this episode (the host's, when its task record states one).
  void set_max_command_s(double seconds) { limits_.max_command_s = seconds; }
  // One tool call; returns the observation (not yet length-capped).
  std::string run(const nlohmann::json& args);

 private:
  ShellResult call_driver(const std::string& arguments, int64_t timeout_ms);
  Workspace& ws_;
  std::string dir_;
  BashLimits limits_;
  std::string start_dir_;
};

DriverReport parse_driver_output(const std::string& raw);
// The model-visible observation of a report (see the OpenHands CmdOutputObservation).
std::string format_observation(const DriverReport& report, const std::string& prefix, const std::string& command,
                               const std::string& timeout_text, const std::string& special_key);
// The first and last max/2 characters around "\n[... Observation truncated due to length ...]\n".
std::string truncate_observation(const std::string& text, size_t max_chars);
// A JSON number as Python prints it (30 -> "30", 30.0 -> "30.0", 2.5 -> "2.5").
std::string python_number(const nlohmann::json& number);

extern const char* const kTimeoutMessageTemplate;
extern const char* const kContinuePrefix;

}  // namespace mlpt::openhands
