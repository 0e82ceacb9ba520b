#include "core/config/components_config.hpp"

#include "core/config/component_kinds.hpp"

namespace mlpt::config {
namespace {

void collect_settings_keys(const TomlTable& table, const std::string& dotted, std::map<std::string, std::string>& out) {
  for (const auto& key : table.keys()) {
    const std::string path = dotted.empty() ? key : dotted + "." + key;
    out[path] = table.where(key);
    if (table.is_table(key)) collect_settings_keys(*table.optional_table(key), path, out);
  }
}

}  // namespace

std::string locate_settings_error(const ComponentConfig& component, const std::string& message) {
  // The longest key the message names wins ("optimizer.lr" over "lr").
  const std::string* where = nullptr;
  size_t best = 0;
  for (const auto& [key, at] : component.settings_where)
    if (key.size() > best && (message.find("settings: " + key + ":") != std::string::npos ||
                              message.find("unknown key '" + key + "'") != std::string::npos))
      where = &at, best = key.size();
  return where ? *where + ": " + message : message;
}

std::vector<ComponentConfig> read_components(const TomlTable& root) {
  std::vector<ComponentConfig> out;
  auto components = root.optional_table("components");
  if (!components) return out;
  for (const auto& kind_name : components->keys()) {
    mlpt_component_kind kind;
    try {
      kind = kind_from_name(kind_name);
    } catch (const Error& e) {
      components->fail(kind_name, e.what());
    }
    TomlTable t = components->table(kind_name);
    ComponentConfig c{kind, t.get<std::string>("plugin"), t.get_or<std::string>("name", ""), t.json("settings"),
                      t.where(""), {}};
    if (t.is_table("settings")) collect_settings_keys(*t.optional_table("settings"), "", c.settings_where);
    t.finish();
    out.push_back(std::move(c));
  }
  components->finish();
  return out;
}

}  // namespace mlpt::config
