#include "core/run/resume_config.hpp"

#include <set>

namespace mlpt::run {
namespace {

// The keys that only place the work, as dotted paths; "x.*" is every key under table x. What is
// not listed defines the run's results (the safe side: a new setting is refused until it is
// judged here).
const std::vector<std::string>& places_work_keys() {
  static const std::vector<std::string> keys = {
      // Which ranks do what and how long the coordinator waits for them.
      "placement.*",
      // Where the run's files go (`--resume DIR` names the folder anyway); how many episodes are in
      // flight and on how many host threads (a choice per cluster, docs/distributed.md); when state
      // is saved; how the weights travel (dense and sparse refits deliver the same weights, checked).
      "run.output_dir", "run.rollout_workers", "run.rollout_threads", "run.grading_threads",
      "run.checkpoint_every_steps", "run.refit", "run.full_refit_every_steps", "run.check_change_lists",
      // What the run shows while it goes: the metrics endpoint and the timeline's cap.
      "run.metrics_port", "run.trace_max_mb", "run.hang_dump_after_s",
      // The trainer's layout and resources: its state reshards on load (trainer_state.hpp), the
      // loss is normalised by the global token count whatever the micro-batches, and a save writes
      // the same bytes whatever its pieces.
      "components.trainer.settings.tensor_parallel", "components.trainer.settings.expert_parallel",
      "components.trainer.settings.threads", "components.trainer.settings.device",
      "components.trainer.settings.micro_batch_tokens", "components.trainer.settings.save_piece_bytes",
      // The engine's layout and resources: a request's tokens do not depend on what is batched or
      // cached beside it (engine.h).
      "components.engine.settings.tensor_parallel", "components.engine.settings.expert_parallel",
      "components.engine.settings.threads", "components.engine.settings.device",
      "components.engine.settings.max_step_tokens", "components.engine.settings.session_memory_bytes",
      "components.engine.settings.prefix_cache_bytes", "components.engine.settings.kv_cache_bytes",
      "components.engine.settings.kv_block_size",
      // Faults a test injects: it resumes without them.
      "components.engine.settings.test_only_fail_at_collective", "components.engine.settings.test_only_fail_rank",
      // A transport moves the trainer's weights to the engines unchanged, whichever it is.
      "components.transport.*",
      // Where sandboxes keep their state on a node, and how many it runs at once.
      "components.sandbox.settings.state_dir", "components.sandbox.settings.cache_dir",
      "components.sandbox.settings.max_sandboxes",
  };
  return keys;
}

std::string toml_key(const std::vector<std::string>& path) {
  std::string table;
  for (size_t i = 0; i + 1 < path.size(); ++i) table += (i ? "." : "") + path[i];
  return table.empty() ? path.back() : "[" + table + "] " + path.back();
}

void collect(const nlohmann::json& before, const nlohmann::json& after, std::vector<std::string>& path,
             std::vector<ConfigChange>& changes) {
  if (before.is_object() || after.is_object()) {
    const nlohmann::json none = nlohmann::json::object();
    const nlohmann::json& b = before.is_object() ? before : none;
    const nlohmann::json& a = after.is_object() ? after : none;
    // A value that became a table (or the reverse) is a change of that key itself.
    if ((before.is_object() != after.is_object()) && !before.is_null() && !after.is_null()) {
      changes.push_back({toml_key(path), before.dump(), after.dump(), only_places_work(path)});
      return;
    }
    std::set<std::string> keys;
    for (const auto& [k, v] : b.items()) keys.insert(k);
    for (const auto& [k, v] : a.items()) keys.insert(k);
    for (const auto& k : keys) {
      path.push_back(k);
      collect(b.contains(k) ? b[k] : nlohmann::json(), a.contains(k) ? a[k] : nlohmann::json(), path, changes);
      path.pop_back();
    }
    return;
  }
  if (before == after) return;
  const auto text = [](const nlohmann::json& v) { return v.is_null() ? std::string("(not set)") : v.dump(); };
  changes.push_back({toml_key(path), text(before), text(after), only_places_work(path)});
}

}  // namespace

bool only_places_work(const std::vector<std::string>& path) {
  std::string dotted;
  for (size_t i = 0; i < path.size(); ++i) dotted += (i ? "." : "") + path[i];
  for (const auto& key : places_work_keys()) {
    const bool subtree = key.size() > 2 && key.compare(key.size() - 2, 2, ".*") == 0;
    if (subtree ? dotted.compare(0, key.size() - 1, key, 0, key.size() - 1) == 0 : dotted == key) return true;
  }
  return false;
}

std::vector<ConfigChange> config_changes(const nlohmann::json& before, const nlohmann::json& after) {
  std::vector<ConfigChange> changes;
  std::vector<std::string> path;
  collect(before, after, path, changes);
  return changes;
}

}  // namespace mlpt::run
