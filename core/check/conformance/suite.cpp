#include "core/check/conformance/suite.hpp"

namespace mlpt::check::conformance {

const char* status_name(Status s) {
  switch (s) {
    case Status::pass:
      return "pass";
    case Status::fail:
      return "fail";
    case Status::skipped:
      return "skipped";
    case Status::not_applicable:
      return "not_applicable";
  }
  return "?";
}

nlohmann::json transport_settings_for_check(const plugin::ComponentSet& set, int64_t receivers,
                                            std::string& note) {
  nlohmann::json settings = set.settings(MLPT_COMPONENT_TRANSPORT);
  note.clear();
  if (settings.is_object() && settings.contains("receivers") && settings["receivers"].is_number_integer() &&
      settings["receivers"].get<int64_t>() != receivers) {
    note = "; settings receivers = " + settings["receivers"].dump() +
           " (a run's rollout workers) checked as receivers = " + std::to_string(receivers) +
           ", the receivers this check creates";
    settings["receivers"] = receivers;
  }
  return settings;
}

int exec(components::SandboxRuntime::Sandbox& sb, const std::string& cmd, int64_t timeout_ms,
         std::string* out, bool* timed_out, size_t output_limit, bool* truncated) {
  auto r = sb.exec(cmd, timeout_ms, {}, output_limit);
  if (out) *out = std::move(r.output);
  if (timed_out) *timed_out = r.timed_out;
  if (truncated) *truncated = r.truncated;
  return r.exit_code;
}

}  // namespace mlpt::check::conformance
