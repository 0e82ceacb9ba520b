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
#include "task_tracker.hpp"
#include "workspace.hpp"

namespace mlpt::openhands {

struct HarnessConfig {
  std::string workspace = "/testbed";
  std::string state_dir = "/tmp/.mlpt_bash";
  // The folder of the editor's path examples in the tool descriptions: as the reference renders them
  // (OpenHands runs from /openhands_setup/OpenHands with its local runtime).
  std::string tool_path_example = "/openhands_setup/OpenHands";
  BashLimits bash;
  // Read from the JSON of the component's config; unknown keys are an error.
  static HarnessConfig from_json(const std::string& json_text);
};

class CodeActEpisode {
 public:
  CodeActEpisode(Workspace& workspace, HarnessConfig config);
  // Prepares the workspace (hidden tests removed, untracked files recorded) and returns
  // {"messages": [system, user], "tools": [...]} (in the reference's key order).
  nlohmann::ordered_json start(const nlohmann::json& task);
  // {"messages": [...], "done": bool, "finish_reason": str}
  nlohmann::json step(const nlohmann::json& reply);
  // {"patch", "answer", "base_commit", "untracked_at_start", ...}; `end` names why it ended.
  nlohmann::json finish(const std::string& end);

 private:
  // OpenHands' validation of one call (response_to_actions): its error text, if any.
  std::optional<std::string> invalid_call(const nlohmann::json& call) const;
  nlohmann::json call_tool(const std::string& name, const nlohmann::json& arguments);

  Workspace& ws_;
  HarnessConfig config_;
  Editor editor_;
  BashTool bash_;
  TaskTracker tasks_;
  std::string base_commit_, answer_;
  std::vector<std::string> untracked_;
  bool trimmed_ = false;  // the image held history past the base, removed at start
  int nudges_ = 0, steps_ = 0, tool_calls_ = 0, tool_errors_ = 0;
  bool done_ = false;
};

}  // namespace mlpt::openhands
