#include "core/plugin/describe.hpp"

#include "core/config/component_kinds.hpp"
#include "core/plugin/kinds/kind.hpp"

namespace mlpt::plugin {

// Every capability the kind's list names that the plugin's record is large enough to hold.
nlohmann::json describe_capabilities(const Component& c) {
  nlohmann::json j = nlohmann::json::object();
  const KindSpec* kind = find_kind_spec(c.kind);
  if (!kind) return j;
  for (const auto& capability : kind->capabilities)
    if (auto value = capability_value(capability, c.capabilities)) j[capability.name] = static_cast<int64_t>(*value);
  return j;
}

nlohmann::json describe(const Plugin& plugin) {
  nlohmann::json j;
  j["path"] = plugin.path().string();
  j["name"] = plugin.name();
  j["version"] = plugin.version();
  auto text = [](mlpt_abi_version v) { return std::to_string(v.major) + "." + std::to_string(v.minor); };
  j["abi_version"] = text(plugin.abi_version());
  j["negotiated_abi_version"] = text(plugin.negotiated_version());
  j["host_abi_version"] = text(mlpt_abi_version{MLPT_ABI_VERSION_MAJOR, MLPT_ABI_VERSION_MINOR});
  j["build_info"] = plugin.build_info();
  j["notes"] = plugin.notes();
  j["components"] = nlohmann::json::array();
  for (const auto& c : plugin.components()) {
    j["components"].push_back({{"kind", config::kind_name(c.kind)},
                               {"name", c.name},
                               {"description", c.description},
                               {"capabilities", describe_capabilities(c)}});
  }
  return j;
}

}  // namespace mlpt::plugin
