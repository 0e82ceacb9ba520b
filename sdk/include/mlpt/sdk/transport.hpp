// C++ adapter for the weight transport component (mlpt/transport.h): derive from
// mlpt::sdk::Transport with a constructor (config JSON, role, group), or (config JSON, role, group,
// const mlpt_component_group*) for an endpoint that may be one of several sender ranks (ABI 1.2; the
// group is NULL when the host passes none), or (const mlpt_transport_create_args&) for one that reads
// the args' extension chain (a wrapper, wrapped_transport.hpp), and list transport_component<T>.
//
// The adapter does the 1.2 layout work once for every transport: `receive` of the class returns what
// the senders published (whole tensors, or every rank's shards with `out_shards`), and the adapter
// cuts the layout the receiver asked for (`want_*`) from it, handing over as they are the tensors
// that need no cut (reshard.hpp). A class that publishes shards (several sender ranks) says so with
// `static constexpr bool kCarriesShards = true`; the adapter refuses a sent shard for any other.
#pragma once

#include <memory>
#include <type_traits>

#include "mlpt/sdk/plugin.hpp"
#include "mlpt/sdk/reshard.hpp"
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
// The ABI handle: the class's endpoint and, on a receiver, the cut of the version it holds.
struct TransportEndpoint {
  std::unique_ptr<Transport> impl;
  std::unique_ptr<LayoutCut> cut;  // the layout handed out for the version held; NULL: as received
  std::vector<LayoutCut::Buffer> spare;  // the last cut's memory, for the next cut
};

inline TransportEndpoint* as_endpoint(mlpt_transport* t) {
  if (!t) throw Error(MLPT_INVALID_ARGUMENT, "transport handle is NULL");
  return reinterpret_cast<TransportEndpoint*>(t);
}
inline Transport* as_transport(mlpt_transport* t) { return as_endpoint(t)->impl.get(); }

template <class T>
constexpr bool carries_shards() {
  if constexpr (requires { T::kCarriesShards; }) return T::kCarriesShards;
  return false;
}

inline void send_checked(Transport& t, const mlpt_transport_send_args& a, bool carries_shards) {
  if (a.num_tensors > 0 && !a.tensors) throw Error(MLPT_INVALID_ARGUMENT, "tensors is NULL");
  const mlpt_tensor_shard* shards = has_field(a, MLPT_STRUCT_SIZE(mlpt_transport_send_args, shards)) ? a.shards : nullptr;
  for (size_t i = 0; shards && !carries_shards && i < a.num_tensors; ++i)
    if (!is_whole(a.tensors[i].tensor, &shards[i]))
      throw Error(MLPT_UNIMPLEMENTED, "'" + to_string(a.tensors[i].name) +
                                          "' is a shard; this transport carries whole tensors from one sender rank");
  t.send(a);
}

// The class's receive, then the wanted layout (transport.h, Receive).
inline void receive_in_layout(TransportEndpoint& e, mlpt_transport_receive_args& a) {
  TensorLayout wanted;
  if (has_field(a, MLPT_STRUCT_SIZE(mlpt_transport_receive_args, out_shards))) {
    wanted = TensorLayout{a.want_tensors, a.want_shards, a.num_want};
    if (wanted.count > 0 && !wanted.tensors) throw Error(MLPT_INVALID_ARGUMENT, "want_tensors is NULL");
    a.out_shards = nullptr;
  }
  e.impl->receive(a);
  const bool shards_in = has_field(a, MLPT_STRUCT_SIZE(mlpt_transport_receive_args, out_shards)) && a.out_shards;
  if (wanted.count == 0 && !shards_in) return;  // whole tensors as published: nothing to cut
  try {
    if (has_field(a, MLPT_STRUCT_SIZE(mlpt_transport_receive_args, out_ready)) && a.out_ready.kind != MLPT_READY_ON_RETURN)
      throw Error(MLPT_UNIMPLEMENTED, "the received tensors are ready only after a device event; the SDK cuts only data ready on return");
    e.cut = std::make_unique<LayoutCut>(std::vector<TensorLayout>{{a.out_tensors, shards_in ? a.out_shards : nullptr, a.out_num_tensors}},
                                        wanted, std::move(e.spare));
  } catch (...) {
    e.impl->release(a.out_version);  // the receiver holds nothing after a failed receive
    throw;
  }
  a.out_tensors = e.cut->tensors().data();
  a.out_num_tensors = e.cut->tensors().size();
  a.out_shards = e.cut->shards().data();
  // What the cut cost, for the run's metrics: bytes copied into the layout, bytes handed over as they are.
  metric("transport/receive_bytes_cut", static_cast<double>(e.cut->bytes_copied()));
  metric("transport/receive_bytes_handed_over", static_cast<double>(e.cut->bytes_handed_over()));
}

inline void release_held(TransportEndpoint& e, uint64_t version) {
  e.impl->release(version);
  if (e.cut) e.spare = e.cut->take_buffers();
  e.cut.reset();
}
}  // namespace detail

// A transport endpoint as a trainer or an engine is given it (mlpt_transport_binding): calls go to
// the transport's table, and its errors come back as Error with their code and message (the
// transport's error object destroyed with its own functions).
class BoundTransport {
 public:
  BoundTransport(const mlpt_transport_binding* b, const char* what) : what_(what) {
    require_struct(b, MLPT_TRANSPORT_BINDING_STRUCT_SIZE, "mlpt_transport_binding");
    if (!b->api || !b->errors || !b->transport)
      throw Error(MLPT_INVALID_ARGUMENT, std::string(what) + " binding: api, errors and transport are required");
    if (!MLPT_HAS_FIELD(b->api, mlpt_transport_api, release_received) || !b->api->release_received)
      throw Error(MLPT_INVALID_ARGUMENT, std::string(what) + " binding: the transport's table is older than ABI 1.2");
    binding_ = *b;
  }
  mlpt_transport* endpoint() const { return binding_.transport; }
  void send(mlpt_transport_send_args& a) const { check(binding_.api->send(&a), "send"); }
  void receive(mlpt_transport_receive_args& a) const { check(binding_.api->receive(&a), "receive"); }
  void release(uint64_t version) const {
    mlpt_transport_release_args a{MLPT_TRANSPORT_RELEASE_ARGS_STRUCT_SIZE, binding_.transport, version, nullptr};
    check(binding_.api->release_received(&a), "release");
  }

 private:
  void check(mlpt_error* e, const char* call) const {
    if (!e) return;
    const mlpt_error_code code = binding_.errors->error_code(e);
    std::string message = std::string("the ") + what_ + "'s " + call + ": " + to_string(binding_.errors->error_message(e));
    binding_.errors->error_destroy(e);
    throw Error(code, message);
  }
  mlpt_transport_binding binding_{};
  const char* what_;
};

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
          const mlpt_component_group* group =
              MLPT_HAS_FIELD(a, mlpt_transport_create_args, component_group) ? a->component_group : nullptr;
          auto e = std::make_unique<detail::TransportEndpoint>();
          if constexpr (std::is_constructible_v<T, const mlpt_transport_create_args&>) {
            e->impl = std::make_unique<T>(*a);  // reads the 1.2 fields itself (MLPT_HAS_FIELD)
          } else if constexpr (std::is_constructible_v<T, std::string_view, mlpt_transport_role, std::string_view,
                                                       const mlpt_component_group*>) {
            e->impl = std::make_unique<T>(view(a->config_json), a->role, view(a->group), group);
          } else {
            if (group && group->size > 1 && a->role == MLPT_TRANSPORT_SENDER)
              throw Error(MLPT_UNIMPLEMENTED, "a sender group of " + std::to_string(group->size) +
                                                  " ranks: this transport takes one sender rank");
            e->impl = std::make_unique<T>(view(a->config_json), a->role, view(a->group));
          }
          a->transport = reinterpret_cast<mlpt_transport*>(e.release());
        });
      },
      [](mlpt_transport* t) { delete reinterpret_cast<detail::TransportEndpoint*>(t); },
      [](mlpt_transport_send_args* a) {
        return guard("transport.send", [&] {
          require_struct(a, MLPT_TRANSPORT_SEND_ARGS_STRUCT_SIZE_1_0, "mlpt_transport_send_args");
          detail::send_checked(*as_transport(a->transport), *a, detail::carries_shards<T>());
        });
      },
      [](mlpt_transport_receive_args* a) {
        return guard("transport.receive", [&] {
          require_struct(a, MLPT_TRANSPORT_RECEIVE_ARGS_STRUCT_SIZE_1_0, "mlpt_transport_receive_args");
          detail::receive_in_layout(*detail::as_endpoint(a->transport), *a);
        });
      },
      [](mlpt_transport* t, uint64_t version) {
        return guard("transport.release", [&] { detail::release_held(*detail::as_endpoint(t), version); });
      },
      nullptr,
      [](mlpt_transport_release_args* a) {
        return guard("transport.release_received", [&] {
          require_struct(a, MLPT_TRANSPORT_RELEASE_ARGS_STRUCT_SIZE_1_2, "mlpt_transport_release_args");
          detail::release_held(*detail::as_endpoint(a->transport), a->version);
        });
      },
  };
  return &api;
}

template <class T>
ComponentSpec transport_component(std::string_view name, std::string_view description,
                                   const mlpt_transport_capabilities* caps) {
  return detail::component(MLPT_COMPONENT_TRANSPORT, name, description, transport_api<T>(), caps);
}

}  // namespace mlpt::sdk
