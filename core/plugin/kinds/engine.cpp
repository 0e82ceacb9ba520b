// The engine kind (mlpt/engine.h).
#include "mlpt/engine.h"

#include "core/plugin/kinds/kind.hpp"

namespace mlpt::plugin {

const KindSpec& engine_kind() {
  using api = mlpt_engine_api;
  using caps = mlpt_engine_capabilities;
  static const KindSpec spec{
      MLPT_COMPONENT_ENGINE,
      "engine.h",
      "mlpt_engine_api",
      "mlpt_engine_capabilities",
      MLPT_ENGINE_API_STRUCT_SIZE_1_0,
      MLPT_ENGINE_CAPABILITIES_STRUCT_SIZE,
      {MLPT_KIND_FUNCTION(api, create, 0, true), MLPT_KIND_FUNCTION(api, destroy, 0, true),
       MLPT_KIND_FUNCTION(api, model_info, 0, true), MLPT_KIND_FUNCTION(api, generate, 0, true),
       MLPT_KIND_FUNCTION(api, cancel, 0, true), MLPT_KIND_FUNCTION(api, session_release, 0, true),
       MLPT_KIND_FUNCTION(api, pause, 0, true), MLPT_KIND_FUNCTION(api, resume, 0, true),
       MLPT_KIND_FUNCTION(api, load_weights, 0, true),
       // 1.2: the host falls back to the 1.0 functions when a table lacks these.
       MLPT_KIND_FUNCTION(api, query_model_info, 2, false),
       MLPT_KIND_FUNCTION(api, pause_generation, 2, false),
       MLPT_KIND_FUNCTION(api, resume_generation, 2, false), MLPT_KIND_FUNCTION(api, submit, 2, false),
       MLPT_KIND_FUNCTION(api, request_is_ready, 2, false), MLPT_KIND_FUNCTION(api, request_await, 2, false),
       MLPT_KIND_FUNCTION(api, request_result, 2, false), MLPT_KIND_FUNCTION(api, request_release, 2, false),
       MLPT_KIND_FUNCTION(api, weight_shards, 2, false), MLPT_KIND_FUNCTION(api, fetch_weights, 2, false)},
      {MLPT_KIND_CAPABILITY(caps, returns_logprobs, 0, "logprobs_returned"),
       MLPT_KIND_CAPABILITY(caps, returns_routed_experts, 0, "routed_experts_recorded"),
       MLPT_KIND_CAPABILITY(caps, keeps_sessions, 0, "session_reuse"),
       MLPT_KIND_CAPABILITY(caps, supports_cancel, 0, "cancel"),
       MLPT_KIND_CAPABILITY(caps, deterministic_seed, 0, "same_seed_same_tokens")},
      {"null_destroy_is_noop", "concurrent_requests_complete", "pause_does_not_nest",
       "engine_group_all_or_none", "engine_group_requests_to_rank_0"},
  };
  return spec;
}

}  // namespace mlpt::plugin
