#include "core/config/component_kinds.hpp"

#include "core/error.hpp"

namespace mlpt::config {

const std::vector<mlpt_component_kind>& all_kinds() {
  static const std::vector<mlpt_component_kind> kinds = {MLPT_COMPONENT_TRAINER,   MLPT_COMPONENT_ENGINE,
                                                         MLPT_COMPONENT_TRANSPORT, MLPT_COMPONENT_SANDBOX,
                                                         MLPT_COMPONENT_REWARD,    MLPT_COMPONENT_HARNESS};
  return kinds;
}

const char* kind_name(mlpt_component_kind kind) {
  switch (kind) {
    case MLPT_COMPONENT_TRAINER:
      return "trainer";
    case MLPT_COMPONENT_ENGINE:
      return "engine";
    case MLPT_COMPONENT_TRANSPORT:
      return "transport";
    case MLPT_COMPONENT_SANDBOX:
      return "sandbox";
    case MLPT_COMPONENT_REWARD:
      return "reward";
    case MLPT_COMPONENT_HARNESS:
      return "harness";
  }
  return "unknown";
}

mlpt_component_kind kind_from_name(const std::string& name) {
  for (auto k : all_kinds())
    if (name == kind_name(k)) return k;
  throw Error(MLPT_INVALID_ARGUMENT, "unknown component kind '" + name +
                                         "' (kinds: trainer, engine, transport, sandbox, reward, harness)");
}

}  // namespace mlpt::config
