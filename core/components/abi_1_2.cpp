// Components of plugins that declare ABI 1.2, the current version: everything the host asks of a
// component is carried as the headers describe it.
#include "core/components/abi_adapter.hpp"

namespace mlpt::components {

const AbiAdapter& abi_1_2_adapter() {
  static const AbiAdapter adapter{
      2,
      true,
      true,
      true,
      true,
      MLPT_TRANSPORT_SEND_ARGS_STRUCT_SIZE,
      MLPT_TRANSPORT_RECEIVE_ARGS_STRUCT_SIZE,
      [](const mlpt_transport_api& api, mlpt_transport* endpoint, uint64_t version) {
        // A 1.2 transport sets release_received; one that left it NULL keeps the 1.0 form working.
        if (!MLPT_HAS_FIELD(&api, mlpt_transport_api, release_received) || !api.release_received)
          return api.release(endpoint, version);
        mlpt_transport_release_args a{MLPT_TRANSPORT_RELEASE_ARGS_STRUCT_SIZE, endpoint, version, nullptr};
        return api.release_received(&a);
      },
  };
  return adapter;
}

}  // namespace mlpt::components
