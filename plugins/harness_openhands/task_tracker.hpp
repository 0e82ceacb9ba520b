// The task_tracker tool (plan mode) as OpenHands runs it: `plan` replaces the task list (rendered
// as the TASKS.md of the session: "# Task List", one numbered line per task with its status icon,
// then its notes) and `view` shows it. The list lives with the episode, outside the sandbox, as
// OpenHands keeps it in its own session store.
#pragma once

#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace mlpt::openhands {

class TaskTracker {
 public:
  // The OpenHands validation error of a call, if any (checked before any action of a reply runs).
  static std::optional<std::string> validate(const nlohmann::json& args);
  // The observation of a valid call.
  std::string run(const nlohmann::json& args);

 private:
  std::optional<std::string> tasks_md_;  // none until the first plan
};

// How Python names a JSON value's type in an error message ("<class 'str'>").
std::string python_type(const nlohmann::json& value);

}  // namespace mlpt::openhands
