#include "runtimes.hpp"

namespace mlpt::sandbox {

std::unique_ptr<sdk::SandboxRuntime> make_runtime(std::string_view config_json) {
  RuntimeConfig c = parse_config(config_json);
  std::string kind = c.runtime;
  if (kind == "auto") kind = find_executable(c.apptainer).empty() ? "bwrap" : "apptainer";
  if (kind == "apptainer") return std::make_unique<ApptainerRuntime>(std::move(c));
  return std::make_unique<BwrapRuntime>(std::move(c));
}

}  // namespace mlpt::sandbox
