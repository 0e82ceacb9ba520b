// The [components.<kind>] tables of a run config: which plugin provides each component, which of
// its components (by name) and the component's settings (passed to it as JSON):
//
//   [components.engine]
//   plugin = "libmlpt_reference.so"   # a file name in the plugin folders, or a path
//   name = "qwen35_cpu"               # optional when the plugin has one component of this kind
//   [components.engine.settings]
//   checkpoint = "runs/tiny/init"
#pragma once

#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/config/toml_table.hpp"
#include "mlpt/mlpt.h"

namespace mlpt::config {

struct ComponentConfig {
  mlpt_component_kind kind;
  std::string plugin;        // as written
  std::string name;          // may be empty
  nlohmann::json settings;   // the settings table as JSON ({} when absent)
  std::string where;         // file:line of the table, for messages
  std::map<std::string, std::string> settings_where;  // dotted settings key -> "file:line:col: 'components.<kind>.settings.<key>'"
};

// A plugin's error about its settings (the SDK's reader says "<component> settings: <key>: ..." or
// "unknown key '<key>'") with the file, line and full key of that setting in the config put in
// front; the message unchanged when it names no setting of `component`.
std::string locate_settings_error(const ComponentConfig& component, const std::string& message);

// Reads every [components.*] table; an unknown kind or key is an error naming file, line and key.
std::vector<ComponentConfig> read_components(const TomlTable& root);

}  // namespace mlpt::config
