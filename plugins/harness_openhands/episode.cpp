#include "episode.hpp"

#include <algorithm>
#include <stdexcept>

#include "mlpt/sdk/error.hpp"
#include "patch.hpp"
#include "prompts.hpp"
#include "text_util.hpp"

namespace mlpt::openhands {

using nlohmann::json;

HarnessConfig HarnessConfig::from_json(const std::string& text) {
  HarnessConfig c;
  json j = text.find_first_not_of(" \t\r\n") == std::string::npos ? json::object() : json::parse(text);
  if (!j.is_object()) throw std::invalid_argument("harness openhands: the config must be a JSON object");
  for (auto& [k, v] : j.items()) {
    auto number = [&] {
      if (!v.is_number() || v.get<double>() <= 0)
        throw std::invalid_argument("harness openhands: config key \"" + k + "\" must be a positive number");
      return v.get<double>();
    };
    if (k == "workspace") c.workspace = v.get<std::string>();
    else if (k == "state_dir") c.state_dir = v.get<std::string>();
    else if (k == "soft_timeout_s") c.bash.soft_timeout_s = number();
    else if (k == "command_timeout_s") c.bash.max_command_s = number();
    else if (k == "max_observation_chars") c.bash.max_observation_chars = static_cast<size_t>(number());
    else
      throw std::invalid_argument("harness openhands: unknown config key \"" + k +
                                  "\" (known: workspace, state_dir, soft_timeout_s, command_timeout_s, "
                                  "max_observation_chars)");
  }
  return c;
}

CodeActEpisode::CodeActEpisode(Workspace& ws, HarnessConfig config)
    : ws_(ws), config_(std::move(config)), editor_(ws, config_.workspace), bash_(ws, config_.state_dir, config_.bash, config_.workspace) {}

json CodeActEpisode::start(const json& task) {
  if (!task.is_object() || !task.contains("problem_statement") || !task["problem_statement"].is_string())
    throw std::invalid_argument("task record has no string field \"problem_statement\"");
  const std::string ws = shell_quote(config_.workspace);
  // The hidden tests never reach the agent: the images of the bundled suite do not hold them, and
  // for images that do (R2E-Gym keeps r2e_tests/ and run_tests.sh), they are deleted here first.
  const std::string image_copies = config_.workspace == "/testbed" ? " /r2e_tests /run_tests.sh" : "";
  ShellResult r = ws_.shell(bash_.install_command() + " >/dev/null 2>&1; rm -rf " + ws + "/r2e_tests " + ws + "/run_tests.sh" + image_copies + " 2>/dev/null; cd " +
                                ws + " && git -c safe.directory='*' rev-parse HEAD && printf '@@MLPT_UNTRACKED@@\\n' && "
                                "git -c safe.directory='*' -c core.quotepath=false ls-files --others --exclude-standard",
                            60000);
  size_t at = r.output.find("@@MLPT_UNTRACKED@@\n");
  if (r.exit_code != 0 || at == std::string::npos)
    throw std::runtime_error("cannot read the git state of " + config_.workspace + " in the sandbox: " + r.output);
  const std::string head(rstrip(r.output.substr(0, at)));
  untracked_ = split_lines(r.output.substr(at + 19));
  base_commit_ = head;
  if (task.contains("parsed_commit_content")) {
    json pcc = task["parsed_commit_content"];
    if (pcc.is_string()) pcc = json::parse(pcc.get<std::string>(), nullptr, false);
    if (pcc.is_object() && pcc.contains("old_commit_hash") && pcc["old_commit_hash"].is_string())
      base_commit_ = pcc["old_commit_hash"].get<std::string>();
  }
  const std::string language = task.contains("repo_language") && task["repo_language"].is_string()
                                   ? task["repo_language"].get<std::string>() : "";
  const std::string base = task.contains("base_commit") && task["base_commit"].is_string()
                               ? task["base_commit"].get<std::string>() : "";
  json messages = json::array({
      {{"role", "system"}, {"content", system_prompt()}},
      {{"role", "user"}, {"content", user_prompt(config_.workspace, task["problem_statement"].get<std::string>(), language, base)}}});
  return {{"messages", messages}, {"tools", tool_schemas(config_.workspace)}};
}

json CodeActEpisode::call_tool(const std::string& name, const json& raw_args) {
  auto tool_message = [&](const std::string& content) {
    return json{{"role", "tool"}, {"name", name},
                {"content", truncate_observation(valid_utf8(content), config_.bash.max_observation_chars)}};
  };
  ++tool_calls_;
  static const std::vector<std::string> known = {"execute_bash", "str_replace_editor", "think", "finish"};
  json args = raw_args;
  if (args.is_string()) args = json::parse(args.get<std::string>(), nullptr, false);
  if (std::find(known.begin(), known.end(), name) == known.end()) {
    ++tool_errors_;
    return tool_message("Tool " + name + " is not registered. (arguments: " + raw_args.dump() +
                        "). Please check the tool name and retry with an existing tool.");
  }
  if (args.is_null() && raw_args.is_null()) args = json::object();
  if (!args.is_object()) {
    ++tool_errors_;
    return tool_message("Failed to parse tool call arguments: " +
                        (raw_args.is_string() ? raw_args.get<std::string>() : raw_args.dump()));
  }
  auto require = [&](const char* key) -> std::string {
    if (args.contains(key) && !args[key].is_null()) return "";
    ++tool_errors_;
    return "Missing required argument \"" + std::string(key) + "\" in tool call " + name;
  };
  if (name == "execute_bash") {
    if (auto e = require("command"); !e.empty()) return tool_message(e);
    return tool_message(bash_.run(args));
  }
  if (name == "str_replace_editor") {
    if (auto e = require("command"); !e.empty()) return tool_message(e);
    if (auto e = require("path"); !e.empty()) return tool_message(e);
    std::string out = editor_.run(args);
    if (out.rfind("ERROR:", 0) == 0) ++tool_errors_;
    return tool_message(out);
  }
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
  for (const auto& e : errors) {
    ++tool_errors_;
    messages.push_back({{"role", "user"}, {"content", "ERROR: " + (e.is_string() ? e.get<std::string>() : e.dump()) +
                                                          "\nPlease check the format of your tool call and retry."}});
  }
  for (const auto& call : calls) {
    if (!call.is_object() || !call.contains("name") || !call["name"].is_string()) {
      ++tool_errors_;
      messages.push_back({{"role", "user"}, {"content", "ERROR: a tool call without a name: " + call.dump()}});
      continue;
    }
    json m;
    try {
      m = call_tool(call["name"].get<std::string>(), call.contains("arguments") ? call["arguments"] : json());
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
  if (calls.empty() && errors.empty()) {
    messages.push_back({{"role", "user"}, {"content", continue_message(nudges_)}});
    ++nudges_;
  }
  if (!done_ && reply.contains("content") && reply["content"].is_string()) answer_ = reply["content"].get<std::string>();
  return {{"messages", messages}, {"done", done_}, {"finish_reason", done_ ? "finish" : ""}};
}

json CodeActEpisode::finish(const std::string& end) {
  json result = {{"answer", answer_}, {"end", end}, {"base_commit", base_commit_}, {"untracked_at_start", untracked_},
                 {"steps", steps_}, {"tool_calls", tool_calls_}, {"tool_errors", tool_errors_},
                 {"continue_nudges", nudges_}, {"patch", ""}};
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
