// A plugin's descriptor and capabilities as JSON, for `mlpt plugins inspect` and compliance reports.
#pragma once

#include <nlohmann/json.hpp>

#include "core/plugin/plugin.hpp"

namespace mlpt::plugin {

nlohmann::json describe_capabilities(const Component& component);
nlohmann::json describe(const Plugin& plugin);

}  // namespace mlpt::plugin
