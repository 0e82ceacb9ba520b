// C++ adapter for the weight transport component (mlpt/transport.h): derive from
// mlpt::sdk::Transport with a constructor (config JSON, role, group), list transport_component<T>.
#pragma once

#include "mlpt/compat_1_1.h"
#include "mlpt/sdk/plugin.hpp"
#include "mlpt/transport.h"

namespace mlpt::sdk {

class Transport {
 public:
  virtual ~Transport() = default;
  virtual void send(const mlpt_transport_send_args& args) = 0;
  virtual void receive(mlpt_transport_receive_args& args) = 0;
  virtual void release(uint64_t version) = 0;
};

namespace detail {
inline Transport* as_transport(mlpt_transport* t) {
  if (!t) throw Error(MLPT_INVALID_ARGUMENT, "transport handle is NULL");
  return reinterpret_cast<Transport*>(t);
}
}  // namespace detail

template <class T>
const mlpt_transport_api* transport_api() {
  using detail::as_transport;
  static const mlpt_transport_api api = {
      MLPT_TRANSPORT_API_STRUCT_SIZE,
      [](mlpt_transport_create_args* a) {
        return guard("transport.create", [&] {
          require_struct(a, MLPT_TRANSPORT_CREATE_ARGS_STRUCT_SIZE_1_0, "mlpt_transport_create_args");
          if (a->role != MLPT_TRANSPORT_SENDER && a->role != MLPT_TRANSPORT_RECEIVER)
            throw Error(MLPT_INVALID_ARGUMENT, "role must be MLPT_TRANSPORT_SENDER or _RECEIVER");
          a->transport = reinterpret_cast<mlpt_transport*>(
              static_cast<Transport*>(new T(view(a->config_json), a->role, view(a->group))));
        });
      },
      [](mlpt_transport* t) { delete reinterpret_cast<Transport*>(t); },
      [](mlpt_transport_send_args* a) {
        return guard("transport.send", [&] {
          require_struct(a, MLPT_TRANSPORT_SEND_ARGS_STRUCT_SIZE_1_0, "mlpt_transport_send_args");
          as_transport(a->transport)->send(*a);
        });
      },
      [](mlpt_transport_receive_args* a) {
        return guard("transport.receive", [&] {
          require_struct(a, MLPT_TRANSPORT_RECEIVE_ARGS_STRUCT_SIZE_1_0, "mlpt_transport_receive_args");
          as_transport(a->transport)->receive(*a);
        });
      },
      [](mlpt_transport_release_args* a) {
        return guard("transport.release", [&] {
          require_struct(a, MLPT_TRANSPORT_RELEASE_ARGS_STRUCT_SIZE_1_2, "mlpt_transport_release_args");
          as_transport(a->transport)->release(a->version);
        });
      },
      nullptr,
  };
  return &api;
}

// The same component as a host of ABI 1.0 or 1.1 expects it: only `release` differs.
template <class T>
const mlpt_transport_api_1_1* transport_api_1_1() {
  static const mlpt_transport_api_1_1 api = {
      MLPT_TRANSPORT_API_STRUCT_SIZE_1_1, transport_api<T>()->create, transport_api<T>()->destroy,
      transport_api<T>()->send, transport_api<T>()->receive,
      [](mlpt_transport* t, uint64_t version) {
        return guard("transport.release", [&] { detail::as_transport(t)->release(version); });
      },
  };
  return &api;
}

template <class T>
ComponentSpec transport_component(std::string_view name, std::string_view description,
                                   const mlpt_transport_capabilities* caps) {
  return detail::component(MLPT_COMPONENT_TRANSPORT, name, description, transport_api<T>(), caps,
                           transport_api_1_1<T>());
}

}  // namespace mlpt::sdk
