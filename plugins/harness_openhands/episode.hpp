// One OpenHands CodeAct rollout over a Workspace: the first messages, the dispatch of each reply's
// tool calls, and the result (patch extracted however the episode ended). Free of the plugin ABI
// so tests drive it over a host folder as well as over a sandbox.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bash_tool.hpp"
#include "editor.hpp"
#include "workspace.hpp"

namespace mlpt::openhands {

struct HarnessConfig {
  std::string workspace = "/testbed";
  std::string state_dir = "/tmp/.mlpt_bash";
  BashLimits bash;
  // Read from the JSON of the component's config; unknown keys are an error.
  static HarnessConfig from_json(const std::string& json_text);
};

class CodeActEpisode {
 public:
  CodeActEpisode(Workspace& workspace, HarnessConfig config);
  // Prepares the workspace (hidden tests removed, untracked files recorded) and returns
  // {"messages": [system, user], "tools": [...]}.
  nlohmann::json start(const nlohmann::json& task);
  // {"messages": [...], "done": bool, "finish_reason": str}
  nlohmann::json step(const nlohmann::json& reply);
  // {"patch", "answer", "base_commit", "untracked_at_start", ...}; `end` names why it ended.
  nlohmann::json finish(const std::string& end);

 private:
  nlohmann::json call_tool(const std::string& name, const nlohmann::json& arguments);

  Workspace& ws_;
  HarnessConfig config_;
  Editor editor_;
  BashTool bash_;
  std::string base_commit_, answer_;
  std::vector<std::string> untracked_;
  int nudges_ = 0, steps_ = 0, tool_calls_ = 0, tool_errors_ = 0;
  bool done_ = false;
};

}  // namespace mlpt::openhands
