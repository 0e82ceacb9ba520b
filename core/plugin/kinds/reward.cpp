// The reward kind (mlpt/reward.h).
#include "mlpt/reward.h"

#include "core/plugin/kinds/kind.hpp"

namespace mlpt::plugin {

const KindSpec& reward_kind() {
  using api = mlpt_reward_api;
  using caps = mlpt_reward_capabilities;
  static const KindSpec spec{
      MLPT_COMPONENT_REWARD,
      "reward.h",
      "mlpt_reward_api",
      "mlpt_reward_capabilities",
      MLPT_REWARD_API_STRUCT_SIZE_1_0,
      MLPT_REWARD_CAPABILITIES_STRUCT_SIZE,
      {MLPT_KIND_FUNCTION(api, create, 0, true), MLPT_KIND_FUNCTION(api, destroy, 0, true),
       MLPT_KIND_FUNCTION(api, grade, 0, true)},
      {MLPT_KIND_CAPABILITY(caps, needs_sandbox, 0, "grades_without_sandbox"),
       MLPT_KIND_CAPABILITY(caps, binary, 0, "rewards_binary")},
      {"null_destroy_is_noop", "empty_result_scores_0"},
  };
  return spec;
}

}  // namespace mlpt::plugin
