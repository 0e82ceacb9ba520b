// The components a run uses, loaded from its config: each plugin file is loaded once, even when it
// provides several components, and each component is looked up by kind (and name).
#pragma once

#include <map>
#include <memory>
#include <optional>

#include "core/config/components_config.hpp"
#include "core/plugin/plugin.hpp"

namespace mlpt::plugin {

class ComponentSet {
 public:
  // Loads every plugin named in `configs`; errors name the config position.
  ComponentSet(const std::vector<config::ComponentConfig>& configs, HostServices& host);

  bool has(mlpt_component_kind kind) const { return entries_.count(kind) != 0; }
  // Throws naming the missing [components.<kind>] table.
  const Component& component(mlpt_component_kind kind) const;
  const nlohmann::json& settings(mlpt_component_kind kind) const;
  std::vector<std::shared_ptr<Plugin>> plugins() const;

 private:
  struct Entry {
    Component component;
    nlohmann::json settings;
  };
  std::map<mlpt_component_kind, Entry> entries_;
  std::map<std::string, std::shared_ptr<Plugin>> by_path_;
};

}  // namespace mlpt::plugin
