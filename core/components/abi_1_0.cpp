// Components of plugins that declare ABI 1.0 or 1.1 (the two differ only in the descriptor's
// build_info, which the loader reads by its size): whole tensors on one rank, ready on return,
// relayed by the host, and `release` in its 1.0 form.
#include "core/components/abi_adapter.hpp"

namespace mlpt::components {

const AbiAdapter& abi_1_0_adapter() {
  static const AbiAdapter adapter{
      0,
      false,
      false,
      false,
      false,
      MLPT_TRANSPORT_SEND_ARGS_STRUCT_SIZE_1_0,
      MLPT_TRANSPORT_RECEIVE_ARGS_STRUCT_SIZE_1_0,
      [](const mlpt_transport_api& api, mlpt_transport* endpoint, uint64_t version) {
        return api.release(endpoint, version);
      },
  };
  return adapter;
}

}  // namespace mlpt::components
