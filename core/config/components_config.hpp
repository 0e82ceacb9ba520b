// The [components.<kind>] tables of a run config: which plugin provides each component, which of
// its components (by name) and the component's settings (passed to it as JSON):
//
//   [components.engine]
//   plugin = "libmlpt_reference.so"   # a file name in the plugin folders, or a path
//   name = "qwen35_cpu"               # optional when the plugin has one component of this kind
//   [components.engine.settings]
//   checkpoint = "runs/tiny/init"
#pragma once

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
};

// Reads every [components.*] table; an unknown kind or key is an error naming file, line and key.
std::vector<ComponentConfig> read_components(const TomlTable& root);

}  // namespace mlpt::config
