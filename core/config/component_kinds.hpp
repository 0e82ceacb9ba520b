// The names of the component kinds as a run config writes them ([components.engine]) and messages
// say them. Here, below plugin/, because reading a config's [components.*] tables needs them.
#pragma once

#include <string>
#include <vector>

#include "mlpt/mlpt.h"

namespace mlpt::config {

// Human name of a kind ("engine") and its inverse (throws on an unknown name).
const char* kind_name(mlpt_component_kind kind);
mlpt_component_kind kind_from_name(const std::string& name);
const std::vector<mlpt_component_kind>& all_kinds();

}  // namespace mlpt::config
