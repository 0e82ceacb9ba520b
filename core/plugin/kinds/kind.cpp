#include "core/plugin/kinds/kind.hpp"

#include <cstring>

#include "core/error.hpp"

namespace mlpt::plugin {

const std::vector<const KindSpec*>& kind_specs() {
  static const std::vector<const KindSpec*> specs = {&trainer_kind(), &engine_kind(), &transport_kind(),
                                                     &sandbox_kind(), &reward_kind(), &harness_kind()};
  return specs;
}

const KindSpec* find_kind_spec(mlpt_component_kind kind) {
  for (const KindSpec* spec : kind_specs())
    if (spec->kind == kind) return spec;
  return nullptr;
}

const KindSpec& kind_spec(mlpt_component_kind kind) {
  if (const KindSpec* spec = find_kind_spec(kind)) return *spec;
  throw Error(MLPT_INVALID_ARGUMENT, "unknown component kind " + std::to_string(kind));
}

std::optional<int32_t> capability_value(const KindCapability& capability, const void* record) {
  if (!record) return std::nullopt;
  const size_t written = *static_cast<const size_t*>(record);
  if (capability.offset + sizeof(int32_t) > written) return std::nullopt;
  int32_t value = 0;
  std::memcpy(&value, static_cast<const char*>(record) + capability.offset, sizeof(value));
  return value;
}

std::vector<std::string> missing_functions(const KindSpec& kind, const void* api) {
  std::vector<std::string> missing;
  const size_t api_size = *static_cast<const size_t*>(api);
  for (const auto& f : kind.functions) {
    void* fn = nullptr;  // a slot past the plugin's table (an older version) counts as NULL
    if (f.offset + sizeof(fn) <= api_size)
      std::memcpy(&fn, static_cast<const char*>(api) + f.offset, sizeof(fn));
    if (f.required && !fn) missing.emplace_back(f.name);
  }
  return missing;
}

}  // namespace mlpt::plugin
