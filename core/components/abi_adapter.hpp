// How the host calls a component whatever ABI minor its plugin declared. One adapter per version
// (abi_1_0.cpp: 1.0 and 1.1; abi_1_2.cpp: the current one), chosen once when an instance is made,
// states what that version can carry and makes the calls whose form changed, so that instances.cpp
// reads the same for every version, as NCCL's plugin loader wraps an older ncclNet_vN in the
// current table. A new minor adds a file here and an entry in abi_adapter().
#pragma once

#include <cstddef>
#include <cstdint>

#include "mlpt/transport.h"

namespace mlpt::components {

struct AbiAdapter {
  uint32_t minor;  // the negotiated minor this adapter serves

  // What 1.2 added that an older component cannot honour; the host refuses what needs it, naming
  // the version, instead of handing it to a plugin that would ignore it.
  bool component_groups;  // create as one rank of several (mlpt.h, Component groups)
  bool shards;            // shard descriptors on send, a wanted layout on receive
  bool device_ready;      // readiness of device memory on send and receive (mlpt.h, Tensors)
  bool bindings;          // endpoints handed to a trainer or engine (transport.h, Binding)

  // The args sizes the host writes for a transport of this version: what it reads, no more.
  size_t transport_send_args_size;
  size_t transport_receive_args_size;

  // transport.h, Release, in this version's form.
  mlpt_error* (*transport_release)(const mlpt_transport_api& api, mlpt_transport* endpoint, uint64_t version);
};

// The adapter of each version, one file each.
const AbiAdapter& abi_1_0_adapter();
const AbiAdapter& abi_1_2_adapter();

// The adapter for a component whose plugin and host negotiated `minor` (same major).
inline const AbiAdapter& abi_adapter(uint32_t minor) {
  return minor >= 2 ? abi_1_2_adapter() : abi_1_0_adapter();
}

}  // namespace mlpt::components
