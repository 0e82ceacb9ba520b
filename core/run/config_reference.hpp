// Every key of a run config, with its type, default and meaning: the source of
// docs/config-reference.md (`mlpt config reference` prints it; a test keeps the file up to date
// and checks that the keys here are exactly the keys read_run_config reads).
#pragma once

#include <string>
#include <vector>

namespace mlpt::run {

struct ConfigKey {
  std::string table;          // "run", "benchmark", "dataset", "components.KIND"
  std::string key;
  std::string type;           // "string", "integer", "float", "boolean", "path", "table"
  std::string default_value;  // "(required)" when it has none
  std::string meaning;
};

const std::vector<ConfigKey>& config_keys();
std::string config_reference_markdown();

}  // namespace mlpt::run
