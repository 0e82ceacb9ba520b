// What a resumed run may change in its config. A run's results are defined by its model, data,
// benchmark (GRPO) block, optimizer and loss settings and seeds: those stay as the run started, or
// `mlpt run --resume` refuses naming the key. Keys that only say where and how the work runs (the
// trainer's and engine's model-parallel layout, the ranks of [placement], threads, devices, memory
// budgets, the transport) may change, so a run that lost nodes resumes on another layout: the
// trainer's checkpoint reshards on load and each engine fetches its own layout at every refit.
// The list of those keys is here and nowhere else.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace mlpt::run {

struct ConfigChange {
  std::string key;            // as the config writes it: "[components.trainer.settings] tensor_parallel"
  std::string before, after;  // the TOML values as JSON; "(not set)" when absent
  bool places_work = false;   // true: a resumed run may make this change
};

// Whether `path` (a key's tables and name, e.g. {"components", "engine", "settings", "threads"})
// only places the work, so that changing it leaves the run's results as they were.
bool only_places_work(const std::vector<std::string>& path);

// Every key whose value differs between two configs (each a TOML file as JSON: tables are
// objects), in key order.
std::vector<ConfigChange> config_changes(const nlohmann::json& before, const nlohmann::json& after);

}  // namespace mlpt::run
