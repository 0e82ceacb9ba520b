// The transport kind (mlpt/transport.h).
#include "mlpt/transport.h"

#include "core/plugin/kinds/kind.hpp"

namespace mlpt::plugin {

const KindSpec& transport_kind() {
  using api = mlpt_transport_api;
  using caps = mlpt_transport_capabilities;
  static const KindSpec spec{
      MLPT_COMPONENT_TRANSPORT,
      "transport.h",
      "mlpt_transport_api",
      "mlpt_transport_capabilities",
      MLPT_TRANSPORT_API_STRUCT_SIZE_1_0,
      MLPT_TRANSPORT_CAPABILITIES_STRUCT_SIZE_1_0,
      {MLPT_KIND_FUNCTION(api, create, 0, true), MLPT_KIND_FUNCTION(api, destroy, 0, true),
       MLPT_KIND_FUNCTION(api, send, 0, true), MLPT_KIND_FUNCTION(api, receive, 0, true),
       MLPT_KIND_FUNCTION(api, release, 0, true),
       // 1.2: the host calls `release` when a table lacks it.
       MLPT_KIND_FUNCTION(api, release_received, 2, false)},
      {MLPT_KIND_CAPABILITY(caps, zero_copy, 0, "uncut_tensor_handed_over"),
       MLPT_KIND_CAPABILITY(caps, cross_process, 0, "declared_reach_consistent"),
       MLPT_KIND_CAPABILITY(caps, cross_node, 0, "declared_reach_consistent"),
       MLPT_KIND_CAPABILITY(caps, supports_cuda, 0, "cuda_tensors_carried"),
       MLPT_KIND_CAPABILITY(caps, checksum, 0, "checksum_round_trip"),
       MLPT_KIND_CAPABILITY(caps, max_sender_ranks, 2, "sender_ranks_wanted_layout")},
      {"null_destroy_is_noop", "round_trip_bitwise", "versions_monotonic", "receive_times_out",
       "wanted_layout_bitwise"},
  };
  return spec;
}

}  // namespace mlpt::plugin
