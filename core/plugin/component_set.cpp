#include "core/plugin/component_set.hpp"

#include "core/config/component_kinds.hpp"
#include "core/plugin/plugin_dirs.hpp"

namespace mlpt::plugin {

ComponentSet::ComponentSet(const std::vector<config::ComponentConfig>& configs, HostServices& host) : host_(&host) {
  for (const auto& c : configs) {
    try {
      auto path = resolve_plugin(c.plugin).string();
      auto& plugin = by_path_[path];
      if (!plugin) plugin = Plugin::load(path, host);
      entries_.emplace(c.kind, Entry{plugin->component(c.kind, c.name), c.settings, c});
    } catch (const Error& e) {
      throw Error(e.code(), c.where + ": [components." + config::kind_name(c.kind) + "]: " + e.what());
    }
  }
}

const Component& ComponentSet::component(mlpt_component_kind kind) const {
  auto it = entries_.find(kind);
  if (it == entries_.end())
    throw Error(MLPT_NOT_FOUND, std::string("the config has no [components.") + config::kind_name(kind) + "] table");
  return it->second.component;
}

const nlohmann::json& ComponentSet::settings(mlpt_component_kind kind) const {
  component(kind);
  return entries_.at(kind).settings;
}

Component ComponentSet::extra(mlpt_component_kind kind, const std::string& plugin, const std::string& name) const {
  std::lock_guard lock(mutex_);
  const auto path = resolve_plugin(plugin).string();
  auto it = by_path_.find(path);
  if (it == by_path_.end()) it = by_path_.emplace(path, Plugin::load(path, *host_)).first;
  return it->second->component(kind, name);
}

std::vector<std::shared_ptr<Plugin>> ComponentSet::plugins() const {
  std::lock_guard lock(mutex_);
  std::vector<std::shared_ptr<Plugin>> out;
  for (const auto& [path, p] : by_path_) out.push_back(p);
  return out;
}

}  // namespace mlpt::plugin
