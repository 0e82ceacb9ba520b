// What the loader requires of each component kind's function table and capability record at ABI
// 1.0: the minimum struct sizes and which function pointers must be set. The one place that knows
// this, used by the loader and by `mlpt check plugins`.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "mlpt/mlpt.h"

namespace mlpt::plugin {

struct TableRules {
  size_t min_api_size;
  size_t min_capabilities_size;
  struct Function {
    const char* name;
    size_t offset;  // of the function pointer in the table
    bool required;
  };
  std::vector<Function> functions;
};

const TableRules& table_rules(mlpt_component_kind kind);

// Names of required functions that `api` (a table of `kind`, already size-checked) leaves NULL or
// that lie past its struct_size.
std::vector<std::string> missing_functions(mlpt_component_kind kind, const void* api);

}  // namespace mlpt::plugin
