#include "task_tracker.hpp"

namespace mlpt::openhands {

using nlohmann::json;

namespace {
// Where OpenHands says it stored the list (its session store; one session per episode here).
constexpr const char* kTaskFile = "sessions/default/TASKS.md";
}  // namespace

std::string python_type(const json& v) {
  const char* name = v.is_string() ? "str" : v.is_boolean() ? "bool" : v.is_number_integer() ? "int"
                     : v.is_number() ? "float" : v.is_null() ? "NoneType" : v.is_array() ? "list" : "dict";
  return std::string("<class '") + name + "'>";
}

std::optional<std::string> TaskTracker::validate(const json& args) {
  if (!args.contains("command")) return "Missing required argument \"command\" in tool call task_tracker";
  if (args["command"] == "plan" && !args.contains("task_list"))
    return "Missing required argument \"task_list\" for \"plan\" command in tool call task_tracker";
  const json list = args.value("task_list", json::array());
  if (!list.is_array()) return "Invalid format for \"task_list\". Expected a list but got " + python_type(list) + ".";
  for (const auto& task : list)
    if (!task.is_object())
      return "Unexpected task format in task_list: " + python_type(task) + ". Each task should be a dictionary.";
  return std::nullopt;
}

std::string TaskTracker::run(const json& args) {
  const std::string command = args["command"].is_string() ? args["command"].get<std::string>() : args["command"].dump();
  if (command == "plan") {
    const json& list = args["task_list"];
    std::string md = "# Task List\n\n";
    int i = 0;
    for (const auto& task : list) {
      ++i;
      auto text = [&](const char* key, const char* fallback) {
        if (!task.contains(key)) return std::string(fallback);
        return task[key].is_string() ? task[key].get<std::string>() : task[key].dump();
      };
      const std::string status = text("status", "todo");
      const char* icon = status == "in_progress" ? "🔄" : status == "done" ? "✅" : "⏳";
      md += std::to_string(i) + ". " + icon + " " + text("title", "Untitled task") + "\n" + text("notes", "") + "\n";
    }
    tasks_md_ = md;
    return "Task list has been updated with " + std::to_string(list.size()) + " items. Stored in session directory: " + kTaskFile;
  }
  if (command == "view") return tasks_md_ ? *tasks_md_ : "No task list found. Use the \"plan\" command to create one.";
  return "Unknown command: " + command;
}

}  // namespace mlpt::openhands
