#include "core/check/conformance.hpp"

#include <atomic>
#include <filesystem>
#include <map>
#include <memory>
#include <set>
#include <sstream>

#include "core/check/conformance/checks.hpp"
#include "core/config/component_kinds.hpp"
#include "core/plugin/component_set.hpp"
#include "core/plugin/kinds/kind.hpp"
#include "core/run/dataset.hpp"

namespace mlpt::check {
namespace {

using conformance::Status;
using conformance::status_name;
using nlohmann::json;

// "NULL is a no-op" (trainer.h, transport.h, reward.h, harness.h): a destroy on NULL returns.
void check_null_destroys(conformance::Suite& s, const plugin::ComponentSet& set) {
  auto probe = [&](mlpt_component_kind kind, const char* kind_name, auto destroy_of) {
    if (!set.has(kind)) return;
    const auto& c = set.component(kind);
    s.check(std::string(kind_name) + " " + c.name, "null_destroy_is_noop", [&](std::string& ev) {
      destroy_of(c);
      ev = "destroy(NULL) returned";
      return true;
    });
  };
  probe(MLPT_COMPONENT_TRAINER, "trainer",
        [](const plugin::Component& c) { c.table<mlpt_trainer_api>()->destroy(nullptr); });
  probe(MLPT_COMPONENT_ENGINE, "engine",
        [](const plugin::Component& c) { c.table<mlpt_engine_api>()->destroy(nullptr); });
  probe(MLPT_COMPONENT_TRANSPORT, "transport",
        [](const plugin::Component& c) { c.table<mlpt_transport_api>()->destroy(nullptr); });
  probe(MLPT_COMPONENT_REWARD, "reward",
        [](const plugin::Component& c) { c.table<mlpt_reward_api>()->destroy(nullptr); });
  probe(MLPT_COMPONENT_HARNESS, "harness", [](const plugin::Component& c) {
    c.table<mlpt_harness_api>()->episode_destroy(nullptr);
    c.table<mlpt_harness_api>()->destroy(nullptr);
  });
}

// Each kind's list (core/plugin/kinds/) names the checks of its capabilities and of the promises its
// header marks [checked: id]: every one must be in the report. One the suite did not reach (an
// earlier check of the component failed or was skipped) is reported skipped; one it never records
// is a failure of the suite itself, so a check named in a list cannot silently go missing.
void check_coverage(conformance::Suite& s, const plugin::ComponentSet& set) {
  for (const plugin::KindSpec* kind : plugin::kind_specs()) {
    if (!set.has(kind->kind)) continue;
    const std::string component =
        std::string(config::kind_name(kind->kind)) + " " + set.component(kind->kind).name;
    std::set<std::string> recorded;
    bool stopped = false;
    for (const auto& c : s.report.checks)
      if (c.component == component)
        recorded.insert(c.id), stopped |= c.status == Status::fail || c.status == Status::skipped;
    std::vector<std::string> listed = kind->promises;
    for (const auto& capability : kind->capabilities)
      listed.insert(listed.end(), capability.checked_by.begin(), capability.checked_by.end());
    for (const auto& id : listed) {
      if (!recorded.insert(id).second) continue;
      if (stopped)
        s.skip(component, id, "not reached: an earlier check of this component failed or was skipped");
      else
        s.record(component, id, false,
                 std::string("named by the ") + config::kind_name(kind->kind) + " kind's list (" +
                     kind->header + "), recorded by no check of the suite");
    }
  }
}

}  // namespace

bool ConformanceReport::passed() const {
  for (const auto& c : checks)
    if (c.status == Status::fail) return false;
  return true;
}

ConformanceReport check_plugins(const run::RunConfig& config, const ConformanceOptions& options) {
  conformance::Suite s;
  s.report.source = config.file.string();
  std::atomic<bool> stop{false};  // the cancellation the checks raise on purpose (host services is_cancelled)
  plugin::HostServices host(&stop);
  std::unique_ptr<plugin::ComponentSet> set;
  s.check("plugins", "load", [&](std::string& ev) {
    set = std::make_unique<plugin::ComponentSet>(config.components, host);
    for (const auto& p : set->plugins())
      ev += (ev.empty() ? "" : "; ") + p->name() + " " + p->version() + " (ABI " +
            std::to_string(p->abi_version().major) + "." + std::to_string(p->abi_version().minor) +
            ", struct sizes and required functions checked)";
    return true;
  });
  if (!set) return s.report;
  check_null_destroys(s, *set);
  {  // the engine and the trainer go before the transport's checks start
    conformance::EngineUnderCheck engine;
    conformance::check_engine(s, *set, engine);
    if (engine.engine) conformance::check_trainer(s, *set, config, engine);
  }
  conformance::check_transport(s, *set);
  conformance::check_sparse_refit(s, *set, config);
  auto data = run::Dataset::load(config.dataset.train);
  conformance::EpisodeEnv env{*set,   data.rows.empty() ? json::object() : data.rows[0], "", "", nullptr,
                              nullptr};
  env.task_json = env.task.dump();
  env.image = data.rows.empty() ? "" : data.image(0, config.dataset.images);
  if (set->has(MLPT_COMPONENT_SANDBOX)) env.runtime = conformance::check_sandbox(s, *set, env.image, stop);
  conformance::check_task_image(s, env);
  conformance::check_harness(s, env);
  std::filesystem::path golden = options.golden;
  if (!golden.empty() && !std::filesystem::is_regular_file(golden))
    throw Error(MLPT_NOT_FOUND,
                "--golden " + golden.string() + ": no such file (JSONL rows {instance_id, patch|result})");
  if (golden.empty() && std::filesystem::exists(config.dataset.train.parent_path() / "golden.jsonl"))
    golden = config.dataset.train.parent_path() / "golden.jsonl";
  conformance::check_reward(s, env, golden);
  check_coverage(s, *set);
  return s.report;
}

nlohmann::json to_json(const ConformanceReport& report) {
  json j = {{"source", report.source}, {"passed", report.passed()}, {"checks", json::array()}};
  for (const auto& c : report.checks)
    j["checks"].push_back({{"component", c.component},
                           {"id", c.id},
                           {"status", status_name(c.status)},
                           {"evidence", c.evidence}});
  return j;
}

std::string format_report(const ConformanceReport& report) {
  std::ostringstream o;
  o << "plugins of " << report.source << "\n";
  std::map<Status, int> count;
  for (const auto& c : report.checks) {
    const char* tag = c.status == Status::pass      ? "PASS"
                      : c.status == Status::fail    ? "FAIL"
                      : c.status == Status::skipped ? "SKIP"
                                                    : "N/A ";
    ++count[c.status];
    std::string head = "  " + std::string(tag) + "  " + c.component + " / " + c.id;
    o << head << std::string(head.size() < 56 ? 56 - head.size() : 1, ' ') << c.evidence << "\n";
  }
  o << count[Status::pass] << " passed, " << count[Status::fail] << " failed, " << count[Status::skipped]
    << " skipped, " << count[Status::not_applicable]
    << " not applicable: " << (report.passed() ? "CONFORMS" : "DOES NOT CONFORM") << "\n";
  return o.str();
}

}  // namespace mlpt::check
