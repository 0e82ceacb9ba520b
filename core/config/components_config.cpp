#include "core/config/components_config.hpp"

#include "core/plugin/plugin.hpp"

namespace mlpt::config {

std::vector<ComponentConfig> read_components(const TomlTable& root) {
  std::vector<ComponentConfig> out;
  auto components = root.optional_table("components");
  if (!components) return out;
  for (const auto& kind_name : components->keys()) {
    mlpt_component_kind kind;
    try {
      kind = plugin::kind_from_name(kind_name);
    } catch (const Error& e) {
      components->fail(kind_name, e.what());
    }
    TomlTable t = components->table(kind_name);
    ComponentConfig c{kind, t.get<std::string>("plugin"), t.get_or<std::string>("name", ""), t.json("settings"),
                      t.where("")};
    t.finish();
    out.push_back(std::move(c));
  }
  components->finish();
  return out;
}

}  // namespace mlpt::config
