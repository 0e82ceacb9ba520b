// The model-visible texts of the OpenHands CodeAct harness: the system prompt, the task prompt of
// NeMo-Gym's swe_agents (issue in <issue_description>, the eight phases), the continue nudge, and
// the four tool schemas (execute_bash, str_replace_editor, think, finish).
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
// [{"type": "function", "function": {"name", "description", "parameters"}}, ...]
nlohmann::json tool_schemas(const std::string& workspace);

}  // namespace mlpt::openhands
