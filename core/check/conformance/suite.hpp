// What every component kind's conformance checks share: the suite that records them in order, and
// the helpers more than one kind uses (a command in a sandbox, transport settings fit for the
// check's own receivers).
#pragma once

#include <cstdint>
#include <exception>
#include <nlohmann/json.hpp>
#include <string>

#include "core/check/conformance.hpp"
#include "core/components/instances.hpp"
#include "core/plugin/component_set.hpp"

namespace mlpt::check::conformance {

using Status = ConformanceCheck::Status;

const char* status_name(Status s);

class Suite {
 public:
  void record(const std::string& component, const std::string& id, bool ok, const std::string& evidence) {
    report.checks.push_back({component, id, ok ? Status::pass : Status::fail, evidence});
  }
  void skip(const std::string& component, const std::string& id, const std::string& why) {
    report.checks.push_back({component, id, Status::skipped, why});
  }
  void not_applicable(const std::string& component, const std::string& id, const std::string& why) {
    report.checks.push_back({component, id, Status::not_applicable, why});
  }
  // Runs `body`; an exception is a failed check with the message as evidence.
  template <class F>
  void check(const std::string& component, const std::string& id, F&& body) {
    try {
      std::string evidence;
      bool ok = body(evidence);
      record(component, id, ok, evidence);
    } catch (const std::exception& e) {
      record(component, id, false, std::string("threw: ") + e.what());
    }
  }
  ConformanceReport report;
};

// The transport's settings for a check that creates `receivers` receivers itself. A config written
// for a distributed run sets "receivers" (the count of receivers a send of the reference transports
// waits for) to its rollout workers, 2 in tiny-distributed.toml: the check's own receivers would
// leave each send waiting for one that never comes until it times out. `note` (empty if the
// settings are kept) says in the evidence what the check changed.
nlohmann::json transport_settings_for_check(const plugin::ComponentSet& set, int64_t receivers,
                                            std::string& note);

// One command in a sandbox: its exit code; output, timeout and truncation flags when asked for.
int exec(components::SandboxRuntime::Sandbox& sb, const std::string& cmd, int64_t timeout_ms,
         std::string* out, bool* timed_out = nullptr, size_t output_limit = 0, bool* truncated = nullptr);

}  // namespace mlpt::check::conformance
