// The trainer kind (mlpt/trainer.h).
#include "mlpt/trainer.h"

#include "core/plugin/kinds/kind.hpp"

namespace mlpt::plugin {

const KindSpec& trainer_kind() {
  using api = mlpt_trainer_api;
  using caps = mlpt_trainer_capabilities;
  static const KindSpec spec{
      MLPT_COMPONENT_TRAINER,
      "trainer.h",
      "mlpt_trainer_api",
      "mlpt_trainer_capabilities",
      MLPT_TRAINER_API_STRUCT_SIZE_1_0,
      MLPT_TRAINER_CAPABILITIES_STRUCT_SIZE,
      {MLPT_KIND_FUNCTION(api, create, 0, true), MLPT_KIND_FUNCTION(api, destroy, 0, true),
       MLPT_KIND_FUNCTION(api, train_step, 0, true), MLPT_KIND_FUNCTION(api, compute_logprobs, 0, true),
       MLPT_KIND_FUNCTION(api, export_weights, 0, true),
       // May be NULL: then supports_state_save is 0.
       MLPT_KIND_FUNCTION(api, save_state, 0, false), MLPT_KIND_FUNCTION(api, load_state, 0, false),
       // NULL: the host exports and relays the weights itself.
       MLPT_KIND_FUNCTION(api, publish_weights, 2, false)},
      {MLPT_KIND_CAPABILITY(caps, supports_routing_replay, 0, "routing_replay_used"),
       MLPT_KIND_CAPABILITY(caps, supports_state_save, 0, "state_save_load_round_trip"),
       MLPT_KIND_CAPABILITY(caps, device_type, 0, "export_device_matches")},
      {"null_destroy_is_noop", "logprobs_match_engine", "weight_export_complete", "export_device_ready",
       "weights_flow_plugin_to_plugin"},
  };
  return spec;
}

}  // namespace mlpt::plugin
