// The harness kind (mlpt/harness.h).
#include "mlpt/harness.h"

#include "core/plugin/kinds/kind.hpp"

namespace mlpt::plugin {

const KindSpec& harness_kind() {
  using api = mlpt_harness_api;
  using caps = mlpt_harness_capabilities;
  static const KindSpec spec{
      MLPT_COMPONENT_HARNESS,
      "harness.h",
      "mlpt_harness_api",
      "mlpt_harness_capabilities",
      MLPT_HARNESS_API_STRUCT_SIZE_1_0,
      MLPT_HARNESS_CAPABILITIES_STRUCT_SIZE,
      {MLPT_KIND_FUNCTION(api, create, 0, true), MLPT_KIND_FUNCTION(api, destroy, 0, true),
       MLPT_KIND_FUNCTION(api, episode_start, 0, true), MLPT_KIND_FUNCTION(api, episode_step, 0, true),
       MLPT_KIND_FUNCTION(api, episode_finish, 0, true), MLPT_KIND_FUNCTION(api, episode_destroy, 0, true)},
      {MLPT_KIND_CAPABILITY(caps, needs_sandbox, 0, "episode_without_sandbox"),
       MLPT_KIND_CAPABILITY(caps, produces_patch, 0, "result_carries_patch")},
      {"null_destroy_is_noop", "start_messages_and_tools", "tool_errors_are_observations",
       "finish_ends_episode"},
  };
  return spec;
}

}  // namespace mlpt::plugin
