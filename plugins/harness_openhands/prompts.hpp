// The model-visible texts of the OpenHands CodeAct harness: the system prompt (the reference's
// long-horizon CodeAct prompt, plan mode; data in prompts/), the task prompt (issue in
// <issue_description>, the eight phases), the continue nudge, and the tool schemas in the
// reference's order (execute_bash, think, finish, task_tracker, str_replace_editor; data in prompts/).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace mlpt::openhands {

std::string system_prompt();
// `language` and `base_commit` may be empty (the template then leaves them out).
std::string user_prompt(const std::string& workspace, const std::string& problem_statement,
                        const std::string& language, const std::string& base_commit);
// The reply to a turn without a tool call; `nudges_before` counts earlier nudges.
std::string continue_message(int nudges_before);
// [{"type": "function", "function": {"name", "description", "parameters"}}, ...] in the reference's
// key order. `path_example` is the folder of the editor's path examples; `max_timeout_s` the
// per-command limit, told to the model in the `timeout` parameter.
nlohmann::ordered_json tool_schemas(const std::string& path_example, double max_timeout_s);

}  // namespace mlpt::openhands
