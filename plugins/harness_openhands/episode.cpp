#include "episode.hpp"

#include <algorithm>
#include <cstdlib>
#include <optional>
#include <stdexcept>

#include "bash_split.hpp"
#include "git_history.hpp"
#include "mlpt/sdk/error.hpp"
#include "mlpt/sdk/settings.hpp"
#include "patch.hpp"
#include "prompts.hpp"
#include "text_util.hpp"

namespace mlpt::openhands {

using nlohmann::json;

HarnessConfig HarnessConfig::from_json(const std::string& text) {
  HarnessConfig c;
  mlpt::sdk::Settings s(text, "harness openhands");
  c.workspace = s.string_or("workspace", c.workspace);
  c.state_dir = s.string_or("state_dir", c.state_dir);
  c.tool_path_example = s.string_or("tool_path_example", c.tool_path_example);
  c.bash.soft_timeout_s = s.number_or("soft_timeout_s", c.bash.soft_timeout_s, 1e-3);
  c.bash.max_command_s = s.number_or("command_timeout_s", c.bash.max_command_s, 1e-3);
  c.bash.max_observation_chars = static_cast<size_t>(s.integer_or("max_observation_chars", static_cast<int64_t>(c.bash.max_observation_chars), 1));
  s.reject_unknown();
  return c;
}

CodeActEpisode::CodeActEpisode(Workspace& ws, HarnessConfig config)
    : ws_(ws), config_(std::move(config)), editor_(ws, config_.workspace), bash_(ws, config_.state_dir, config_.bash, config_.workspace) {}

nlohmann::ordered_json CodeActEpisode::start(const json& task) {
  if (!task.is_object() || !task.contains("problem_statement") || !task["problem_statement"].is_string())
    throw std::invalid_argument("task record has no string field \"problem_statement\"");
  // The host's limits travel in the task record ("mlpt_limits", harness.h); they rule over the config.
  if (task.contains("mlpt_limits") && task["mlpt_limits"].is_object()) {
    const json& limits = task["mlpt_limits"];
    if (limits.contains("command_timeout_s") && limits["command_timeout_s"].is_number() && limits["command_timeout_s"].get<double>() > 0) {
      config_.bash.max_command_s = limits["command_timeout_s"].get<double>();
      bash_.set_max_command_s(config_.bash.max_command_s);
    }
  }
  // The diff base: the record's old commit (R2E rows may store it as "<fix>^", which the task's
  // preparation resolves), resolved in the repository; HEAD when it names nothing there.
  std::string declared_base;
  if (task.contains("parsed_commit_content")) {
    json pcc = task["parsed_commit_content"];
    if (pcc.is_string()) pcc = json::parse(pcc.get<std::string>(), nullptr, false);
    if (pcc.is_object() && pcc.contains("old_commit_hash") && pcc["old_commit_hash"].is_string())
      declared_base = pcc["old_commit_hash"].get<std::string>();
  }
  const std::string ws = shell_quote(config_.workspace);
  // The hidden tests never reach the agent: the images of the bundled suite do not hold them, and
  // for images that do (R2E-Gym keeps r2e_tests/ and run_tests.sh), they are deleted here first.
  const std::string image_copies = config_.workspace == "/testbed" ? " /r2e_tests /run_tests.sh" : "";
  const std::string base_rev = shell_quote((declared_base.empty() ? std::string("HEAD") : declared_base) + "^{commit}");
  // The fix commit, which the agent must not reach (whatever the image holds, see git_history.hpp).
  const std::string fix = task.contains("commit_hash") && task["commit_hash"].is_string() ? task["commit_hash"].get<std::string>() : "";
  ShellResult r = ws_.shell(bash_.install_command() + " >/dev/null 2>&1; rm -rf " + ws + "/r2e_tests " + ws + "/run_tests.sh" + image_copies + " 2>/dev/null; cd " +
                                ws + " && base=$({ git -c safe.directory='*' rev-parse --verify -q " + base_rev + " || git -c safe.directory='*' rev-parse HEAD; }) && "
                                "printf '%s\\n' \"$base\" && ( " + trim_history_command(config_.workspace, "\"$base\"", fix) + ") && cd " + ws +
                                " && printf '@@MLPT_UNTRACKED@@\\n' && git -c safe.directory='*' -c core.quotepath=false ls-files --others --exclude-standard",
                            600000);
  size_t at = r.output.find("@@MLPT_UNTRACKED@@\n");
  if (r.exit_code != 0 || at == std::string::npos)
    throw std::runtime_error("cannot read or trim the git state of " + config_.workspace + " in the sandbox: " + r.output);
  base_commit_ = split_lines(r.output.substr(0, at)).at(0);
  trimmed_ = r.output.substr(0, at).find("@@MLPT_TRIMMED@@") != std::string::npos;
  untracked_ = split_lines(r.output.substr(at + 19));
  // As the reference's template: the language defaults to python; the base commit is the resolved one.
  const std::string language = task.contains("repo_language") && task["repo_language"].is_string()
                                   ? task["repo_language"].get<std::string>() : "python";
  using ordered = nlohmann::ordered_json;
  ordered messages = ordered::array({
      ordered{{"role", "system"}, {"content", system_prompt()}},
      ordered{{"role", "user"}, {"content", user_prompt(config_.workspace, task["problem_statement"].get<std::string>(), language, base_commit_)}}});
  return ordered{{"messages", messages}, {"tools", tool_schemas(config_.tool_path_example, config_.bash.max_command_s)}};
}

namespace {

// A JSON value as Python's repr() prints the dict it parses to (OpenHands quotes arguments so).
std::string python_repr(const json& v) {
  if (v.is_string()) {
    const std::string s = v.get<std::string>();
    const char quote = s.find('\'') != std::string::npos && s.find('"') == std::string::npos ? '"' : '\'';
    std::string out(1, quote);
    for (char c : s) {
      if (c == '\\' || c == quote) out += '\\', out += c;
      else if (c == '\n') out += "\\n";
      else if (c == '\t') out += "\\t";
      else if (c == '\r') out += "\\r";
      else out += c;
    }
    return out + quote;
  }
  if (v.is_boolean()) return v.get<bool>() ? "True" : "False";
  if (v.is_null()) return "None";
  if (v.is_array()) {
    std::string out = "[";
    for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + python_repr(v[i]);
    return out + "]";
  }
  if (v.is_object()) {
    std::string out = "{";
    bool first = true;
    for (auto& [k, x] : v.items()) out += (first ? "" : ", ") + python_repr(json(k)) + ": " + python_repr(x), first = false;
    return out + "}";
  }
  return v.dump();
}

// The editor's declared parameters, in the order of its schema.
const std::vector<std::string>& editor_parameters() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> out;
    for (const auto& tool : tool_schemas("", 0))
      if (tool["function"]["name"] == "str_replace_editor")
        for (const auto& [key, schema] : tool["function"]["parameters"]["properties"].items())
          out.push_back(key);
    return out;
  }();
  return names;
}

// OpenHands prints the allowed names as a Python set; its order varies with Python's string
// hashing from process to process, so the schema's order stands in for it.
std::string python_set(const std::vector<std::string>& names) {
  std::string out = "{";
  for (size_t i = 0; i < names.size(); ++i) out += (i ? ", " : "") + python_repr(json(names[i]));
  return out + "}";
}

json arguments_of(const json& call) {
  json args = call.contains("arguments") ? call["arguments"] : json::object();
  if (args.is_string()) args = json::parse(args.get<std::string>(), nullptr, false);
  return args;
}

}  // namespace

std::optional<std::string> CodeActEpisode::invalid_call(const json& call) const {
  if (!call.is_object() || !call.contains("name") || !call["name"].is_string()) return "a tool call without a name: " + call.dump();
  const std::string name = call["name"].get<std::string>();
  const json args = arguments_of(call);
  if (!args.is_object()) {
    const json raw = call.contains("arguments") ? call["arguments"] : json();
    return "Failed to parse tool call arguments: " + (raw.is_string() ? raw.get<std::string>() : raw.dump());
  }
  auto missing = [&](const char* key) { return "Missing required argument \"" + std::string(key) + "\" in tool call " + name; };
  if (name == "execute_bash") {
    if (!args.contains("command")) return missing("command");
    if (args.contains("timeout") && !args["timeout"].is_number()) {
      const json& t = args["timeout"];
      const std::string text = t.is_string() ? t.get<std::string>() : t.dump();
      char* end = nullptr;
      std::strtod(text.c_str(), &end);
      if (text.empty() || end != text.c_str() + text.size())
        return "Invalid float passed to 'timeout' argument: " + text;
    }
    return std::nullopt;
  }
  if (name == "str_replace_editor") {
    if (!args.contains("command")) return missing("command");
    if (!args.contains("path")) return missing("path");
    // An edit (any command but view, which reads only view_range) takes the declared parameters only.
    if (args["command"] != "view")
      for (const auto& [key, value] : args.items()) {
        const auto& allowed = editor_parameters();
        if (std::find(allowed.begin(), allowed.end(), key) == allowed.end())
          return "Unexpected argument " + key + " in tool call " + name +
                 ". Allowed arguments are: " + python_set(allowed);
      }
    return std::nullopt;
  }
  if (name == "task_tracker") return TaskTracker::validate(args);
  if (name == "think" || name == "finish") return std::nullopt;
  return "Tool " + name + " is not registered. (arguments: " + python_repr(args) +
         "). Please check the tool name and retry with an existing tool.";
}

json CodeActEpisode::call_tool(const std::string& name, const json& args) {
  auto tool_message = [&](const std::string& content) {
    return json{{"role", "tool"}, {"name", name},
                {"content", truncate_observation(valid_utf8(content), config_.bash.max_observation_chars)}};
  };
  ++tool_calls_;
  if (name == "execute_bash") {
    // Several commands in one call run nothing: OpenHands answers with an error observation, its
    // content capped like any other and then marked as an error.
    if (args.contains("command") && args["command"].is_string()) {
      const std::string& command = args["command"].get_ref<const std::string&>();
      const size_t first = command.find_first_not_of(" \t\n\r\f\v");
      const std::vector<std::string> commands =
          split_bash_commands(first == std::string::npos ? "" : std::string(rstrip(command.substr(first))));
      if (commands.size() > 1) {
        ++tool_errors_;
        json m = tool_message(multiple_commands_error(commands));
        m["content"] = m["content"].get<std::string>() + "\n[Error occurred in processing last action]";
        return m;
      }
    }
    return tool_message(bash_.run(args));
  }
  if (name == "str_replace_editor") {
    std::string out = editor_.run(args);
    if (out.rfind("ERROR:", 0) == 0) ++tool_errors_;
    return tool_message(out);
  }
  if (name == "task_tracker") return tool_message(tasks_.run(args));
  if (name == "think") return tool_message("Your thought has been logged.");
  // finish
  done_ = true;
  answer_ = args.contains("message") && args["message"].is_string() ? args["message"].get<std::string>() : "";
  return json();
}

json CodeActEpisode::step(const json& reply) {
  if (!reply.is_object()) throw std::invalid_argument("reply must be a JSON object");
  ++steps_;
  json messages = json::array();
  if (done_) return {{"messages", messages}, {"done", true}, {"finish_reason", "finish"}};
  const json calls = reply.contains("tool_calls") && reply["tool_calls"].is_array() ? reply["tool_calls"] : json::array();
  const json errors = reply.contains("parse_errors") && reply["parse_errors"].is_array() ? reply["parse_errors"] : json::array();
  // As OpenHands: the first malformed call (unparsable, unknown tool, missing or invalid argument)
  // drops every action of the reply, and the error comes back as a user message.
  std::optional<std::string> error;
  if (!errors.empty()) error = errors[0].is_string() ? errors[0].get<std::string>() : errors[0].dump();
  for (size_t i = 0; i < calls.size() && !error; ++i) error = invalid_call(calls[i]);
  if (error) {
    ++tool_errors_;
    messages.push_back({{"role", "user"}, {"content", truncate_observation(valid_utf8(*error), config_.bash.max_observation_chars) +
                                                          "\n[Error occurred in processing last action]"}});
    return {{"messages", messages}, {"done", false}, {"finish_reason", ""}};
  }
  for (const auto& call : calls) {
    json m;
    try {
      m = call_tool(call["name"].get<std::string>(), arguments_of(call));
    } catch (const std::exception& e) {
      auto* sandbox_error = dynamic_cast<const sdk::Error*>(&e);
      if (sandbox_error && sandbox_error->code() == MLPT_CANCELLED) throw;  // the run is stopping
      // Whatever the agent did to the sandbox, its tool call ends as an observation, not the run.
      ++tool_errors_;
      m = {{"role", "tool"}, {"name", call["name"]}, {"content", "ERROR: the tool failed: " + valid_utf8(e.what())}};
    }
    if (done_) break;
    messages.push_back(std::move(m));
  }
  if (calls.empty()) {
    messages.push_back({{"role", "user"}, {"content", continue_message(nudges_)}});
    ++nudges_;
  }
  if (!done_ && reply.contains("content") && reply["content"].is_string()) answer_ = reply["content"].get<std::string>();
  return {{"messages", messages}, {"done", done_}, {"finish_reason", done_ ? "finish" : ""}};
}

json CodeActEpisode::finish(const std::string& end) {
  json result = {{"answer", answer_}, {"end", end}, {"base_commit", base_commit_}, {"untracked_at_start", untracked_},
                 {"steps", steps_}, {"tool_calls", tool_calls_}, {"tool_errors", tool_errors_},
                 {"continue_nudges", nudges_}, {"history_trimmed", trimmed_}, {"patch", ""}};
  try {
    // Stop what the agent left running so the diff sees settled files.
    ShellResult r = ws_.shell("p=$(cat " + shell_quote(config_.state_dir + "/pid") + " 2>/dev/null) && kill -KILL -- -$p 2>/dev/null; " +
                              patch_command(config_.workspace, base_commit_), 120000);
    if (r.exit_code != 0 || r.timed_out)
      result["patch_error"] = "git diff failed (exit " + std::to_string(r.exit_code) + "): " + valid_utf8(r.output.substr(0, 2000));
    else if (r.truncated)  // a cut diff is not the agent's change: no patch rather than part of one
      result["patch_error"] = "the diff is larger than the output limit (" + std::to_string(r.output.size()) + " bytes kept)";
    else
      result["patch"] = valid_utf8(drop_binary_diffs(r.output));
  } catch (const std::exception& e) {
    result["patch_error"] = std::string("the sandbox failed while extracting the patch: ") + e.what();
  }
  return result;
}

}  // namespace mlpt::openhands
