// What the host knows of each component kind, one list per kind (kinds/<kind>.cpp mirrors
// abi/include/mlpt/<kind>.h): the functions of its table and the fields of its capability record,
// each with the ABI minor that introduced it, the conformance checks that verify each capability,
// and the promises its header marks `[checked: id]`. The loader's table rules, `mlpt plugins
// inspect` and the conformance suite's coverage are all read from these lists, so they cannot drift
// apart; tests/unit/abi parses the headers and fails when a list misses a function, a field or a
// marked promise.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "mlpt/mlpt.h"

namespace mlpt::plugin {

struct KindFunction {
  const char* name;
  size_t offset;   // of the function pointer in the table
  uint32_t since;  // the ABI minor that appended it (0: there since 1.0)
  bool required;   // the loader refuses a table that leaves it NULL
};

struct KindCapability {
  const char* name;
  size_t offset;   // of the field in the capability record; every capability is int-sized
  uint32_t since;  // the ABI minor that appended it
  std::vector<std::string> checked_by;  // the conformance checks that verify it
};

struct KindSpec {
  mlpt_component_kind kind;       // its name: config::kind_name
  const char* header;             // "engine.h"
  const char* api_type;           // "mlpt_engine_api"
  const char* capabilities_type;  // "mlpt_engine_capabilities"
  size_t min_api_size;            // the table of ABI 1.0: the least the loader accepts
  size_t min_capabilities_size;   // the record of ABI 1.0
  std::vector<KindFunction> functions;
  std::vector<KindCapability> capabilities;
  // The conformance checks of the promises the kind's header marks `[checked: id]`.
  std::vector<std::string> promises;
};

// Every kind this host knows, in mlpt_component_kind order.
const std::vector<const KindSpec*>& kind_specs();
// The spec of `kind`; NULL for a kind this host does not know.
const KindSpec* find_kind_spec(mlpt_component_kind kind);
// The spec of `kind`; throws MLPT_INVALID_ARGUMENT for an unknown kind.
const KindSpec& kind_spec(mlpt_component_kind kind);

// The value of `capability` in `record` (a capability record of its kind), or nullopt when the
// record, as its writer sized it, ends before the field (an older plugin).
std::optional<int32_t> capability_value(const KindCapability& capability, const void* record);

// Names of required functions that `api` (a table of `kind`, already size-checked) leaves NULL or
// that lie past its struct_size.
std::vector<std::string> missing_functions(const KindSpec& kind, const void* api);

// Each kind's list, one file each.
const KindSpec& trainer_kind();
const KindSpec& engine_kind();
const KindSpec& transport_kind();
const KindSpec& sandbox_kind();
const KindSpec& reward_kind();
const KindSpec& harness_kind();

}  // namespace mlpt::plugin

// For the kind files: an entry of a table `type` / a capability record `type`. A capability that is
// not int-sized fails to compile (capability_value reads 4 bytes).
// clang-format off
#define MLPT_KIND_FUNCTION(type, field, since, required) \
  ::mlpt::plugin::KindFunction{#field, offsetof(type, field), since, required}
#define MLPT_KIND_CAPABILITY(type, field, since, ...) \
  ::mlpt::plugin::KindCapability{ \
      #field, (static_cast<void>(sizeof(char[sizeof(((type*)nullptr)->field) == 4 ? 1 : -1])), offsetof(type, field)), \
      since, {__VA_ARGS__}}
// clang-format on
