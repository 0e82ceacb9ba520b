// The sandbox kind (mlpt/sandbox.h).
#include "mlpt/sandbox.h"

#include "core/plugin/kinds/kind.hpp"

namespace mlpt::plugin {

const KindSpec& sandbox_kind() {
  using api = mlpt_sandbox_api;
  using caps = mlpt_sandbox_capabilities;
  static const KindSpec spec{
      MLPT_COMPONENT_SANDBOX,
      "sandbox.h",
      "mlpt_sandbox_api",
      "mlpt_sandbox_capabilities",
      MLPT_SANDBOX_API_STRUCT_SIZE_1_0,
      MLPT_SANDBOX_CAPABILITIES_STRUCT_SIZE,
      {MLPT_KIND_FUNCTION(api, runtime_create, 0, true), MLPT_KIND_FUNCTION(api, runtime_destroy, 0, true),
       MLPT_KIND_FUNCTION(api, create, 0, true), MLPT_KIND_FUNCTION(api, destroy, 0, true),
       MLPT_KIND_FUNCTION(api, exec, 0, true), MLPT_KIND_FUNCTION(api, read_file, 0, true),
       MLPT_KIND_FUNCTION(api, write_file, 0, true)},
      {MLPT_KIND_CAPABILITY(caps, isolates_network, 0, "no_network"),
       MLPT_KIND_CAPABILITY(caps, isolates_pids, 0, "fresh_pid_namespace"),
       MLPT_KIND_CAPABILITY(caps, limits_memory, 0, "memory_limit_holds"),
       MLPT_KIND_CAPABILITY(caps, limits_processes, 0, "process_limit_holds"),
       MLPT_KIND_CAPABILITY(caps, discards_writes, 0, "writable_layer_discarded")},
      {"null_destroy_is_noop", "timeout_kills_tree", "clean_environment", "default_workdir_testbed",
       "output_merged_in_order", "output_limit_truncates", "binary_output_unchanged", "exit_code_of_signal",
       "read_file_bounded", "read_missing_file_not_found", "files_round_trip",
       "exec_honours_host_cancellation"},
  };
  return spec;
}

}  // namespace mlpt::plugin
