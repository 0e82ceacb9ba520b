#include <set>

#include "core/check/conformance/checks.hpp"

namespace mlpt::check::conformance {
namespace {

using nlohmann::json;

// A parsed model reply as the core hands it to the harness.
json reply(json tool_calls, json parse_errors = json::array()) {
  return {{"content", ""}, {"tool_calls", std::move(tool_calls)}, {"parse_errors", std::move(parse_errors)}};
}

std::string tool_name(const json& tool) {
  const json& f = tool.contains("function") ? tool["function"] : tool;
  return f.contains("name") && f["name"].is_string() ? f["name"].get<std::string>() : "";
}

}  // namespace

void check_harness(Suite& s, EpisodeEnv& env) {
  const auto& hc = env.set.component(MLPT_COMPONENT_HARNESS);
  const std::string name = "harness " + hc.name;
  s.check(name, "create", [&](std::string& ev) {
    env.harness = std::make_unique<components::Harness>(hc, env.set.settings(MLPT_COMPONENT_HARNESS));
    ev = std::string("needs_sandbox = ") + (env.harness->capabilities().needs_sandbox ? "1" : "0");
    return true;
  });
  if (!env.harness) return;
  if (!env.can_run_episodes()) {
    s.skip(name, "episode", "the harness needs a sandbox and the combination or the first task has none");
    return;
  }
  const auto& hcaps = env.harness->capabilities();
  if (hcaps.needs_sandbox) {
    s.not_applicable(name, "episode_without_sandbox", "capability needs_sandbox = 1");
  } else {
    s.check(name, "episode_without_sandbox", [&](std::string& ev) {
      auto o = env.open();  // no sandbox: the harness said it needs none
      o.episode->step(reply(json::array()));
      o.episode->finish(MLPT_EPISODE_FINISHED);
      ev = "an episode started, stepped and finished with no sandbox";
      return !o.box;
    });
  }
  if (!hcaps.produces_patch) {
    s.not_applicable(name, "result_carries_patch", "capability produces_patch = 0");
  } else {
    s.check(name, "result_carries_patch", [&](std::string& ev) {
      auto o = env.open();
      const json result = o.episode->finish(MLPT_EPISODE_FINISHED);
      const bool patch = result.contains("patch") && result["patch"].is_string();
      ev = std::string("an episode's result ") + (patch ? "carries" : "does NOT carry") +
           " a \"patch\" string";
      return patch;
    });
  }
  std::set<std::string> tools;
  s.check(name, "start_messages_and_tools", [&](std::string& ev) {
    auto o = env.open();
    const json& start = o.episode->start();
    const json& messages = start.at("messages");
    const json declared = start.value("tools", json::array());
    bool ok = messages.is_array() && !messages.empty() && declared.is_array();
    std::string names;
    for (const auto& m : messages)
      ok &= m.contains("role") && m.contains("content") && m["content"].is_string();
    for (const auto& t : declared) {
      const std::string tool = tool_name(t);
      ok &= !tool.empty();
      tools.insert(tool);
      names += (names.empty() ? "" : ", ") + (tool.empty() ? "?" : tool);
    }
    ev = std::to_string(messages.size()) +
         " opening message(s) with role and content; tools: " + (names.empty() ? "none" : names);
    o.episode->finish(MLPT_EPISODE_ERROR);
    return ok;
  });
  if (tools.empty()) {
    for (const char* id : {"tool_errors_are_observations", "bash_runs_in_sandbox", "finish_ends_episode"})
      s.not_applicable(name, id, "the harness declares no tools");
    return;
  }
  // Garbled and unknown calls must come back as messages for the model, never end in an error.
  s.check(name, "tool_errors_are_observations", [&](std::string& ev) {
    auto o = env.open();
    json a = o.episode->step(reply(json::array(), {"tool call 1: unclosed <tool_call>"}));
    json b = o.episode->step(reply({{{"name", "mlpt_no_such_tool"}, {"arguments", json::object()}}}));
    o.episode->finish(MLPT_EPISODE_ERROR);
    auto said = [](const json& out, const std::string& needle) {
      for (const auto& m : out.value("messages", json::array()))
        if (m.value("content", "").find(needle) != std::string::npos) return true;
      return false;
    };
    bool garbled_ok = !a.value("done", true) && !a["messages"].empty();
    bool unknown_ok = !b.value("done", true) && said(b, "mlpt_no_such_tool");
    ev = std::string("parse error -> ") +
         (garbled_ok ? "an observation, episode goes on" : "NO observation or episode ended") +
         "; unknown tool -> " + (unknown_ok ? "an observation naming it" : "NO observation naming it");
    return garbled_ok && unknown_ok;
  });
  if (tools.count("execute_bash")) {
    s.check(name, "bash_runs_in_sandbox", [&](std::string& ev) {
      auto o = env.open();
      json out = o.episode->step(
          reply({{{"name", "execute_bash"},
                  {"arguments", {{"command", "echo mlpt-$((6*7))"}, {"security_risk", "LOW"}}}}}));
      o.episode->finish(MLPT_EPISODE_ERROR);
      std::string text = out["messages"].empty() ? "" : out["messages"].back().value("content", "");
      ev = "echo mlpt-$((6*7)) -> " + json(text.substr(0, 80)).dump();
      return text.find("mlpt-42") != std::string::npos;
    });
  } else {
    s.not_applicable(name, "bash_runs_in_sandbox", "the harness declares no execute_bash tool");
  }
  if (tools.count("finish")) {
    s.check(name, "finish_ends_episode", [&](std::string& ev) {
      auto o = env.open();
      json out = o.episode->step(reply({{{"name", "finish"}, {"arguments", {{"message", "done"}}}}}));
      o.episode->finish(MLPT_EPISODE_FINISHED);
      ev = "finish -> done = " + std::string(out.value("done", false) ? "true" : "false") + ", reason " +
           out.value("finish_reason", std::string("?"));
      return out.value("done", false);
    });
  } else {
    s.not_applicable(name, "finish_ends_episode", "the harness declares no finish tool");
  }
}

}  // namespace mlpt::check::conformance
