// The components a run uses, loaded from its config: each plugin file is loaded once, even when it
// provides several components, and each component is looked up by kind (and name).
#pragma once

#include <map>
#include <mutex>
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
  // A component the run composes beside its config's (the sparse refit's transport, wrapping the
  // config's): `name` of `kind` from the plugin file `plugin`, found in the plugin folders.
  Component extra(mlpt_component_kind kind, const std::string& plugin, const std::string& name) const;

  // Runs `create` (making the component of `kind`); a settings error it throws gets the file, line
  // and key of the setting in the config (config::locate_settings_error).
  template <class Create>
  auto create(mlpt_component_kind kind, Create&& create) const {
    try {
      return create();
    } catch (const Error& e) {
      auto it = entries_.find(kind);
      if (it == entries_.end()) throw;
      throw Error(e.code(), config::locate_settings_error(it->second.config, e.what()));
    }
  }

  // The component of `kind` as a `T` (components::Engine, ...) from its config's settings and
  // `extra` constructor arguments, with create()'s error locations.
  template <class T, class... Extra>
  std::unique_ptr<T> make(mlpt_component_kind kind, Extra&&... extra) const {
    return create(kind, [&] { return std::make_unique<T>(component(kind), settings(kind), std::forward<Extra>(extra)...); });
  }

 private:
  struct Entry {
    Component component;
    nlohmann::json settings;
    config::ComponentConfig config;
  };
  std::map<mlpt_component_kind, Entry> entries_;
  HostServices* host_;
  mutable std::mutex mutex_;  // extra() loads on first use, from any thread
  mutable std::map<std::string, std::shared_ptr<Plugin>> by_path_;
};

}  // namespace mlpt::plugin
