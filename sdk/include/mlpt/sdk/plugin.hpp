// The plugin side of loading: the host services a plugin was given, logging through them, and the
// descriptor. A C++ plugin's whole entry point is:
//
//   MLPT_SDK_PLUGIN("my-plugin", "1.2.0",
//                   mlpt::sdk::engine_component<MyEngine>("my_engine", "what it is", &kMyCaps))
//
// which exports `mlpt_plugin_init`, refuses a host of another ABI major (saying why), and returns
// a descriptor built from the listed components.
#pragma once

#include <atomic>
#include <string>
#include <string_view>
#include <vector>

#include "mlpt/mlpt.h"
#include "mlpt/sdk/error.hpp"
#include "mlpt/sdk/types.hpp"

namespace mlpt::sdk {

// ---- Host services ----

// The host's services, set by the entry point; NULL before it ran (e.g. in a unit test that
// instantiates a component class directly), in which case logging goes nowhere.
inline std::atomic<const mlpt_host_services*>& host_slot() {
  static std::atomic<const mlpt_host_services*> host{nullptr};
  return host;
}
inline const mlpt_host_services* host() { return host_slot().load(std::memory_order_acquire); }

inline void log(mlpt_log_level level, std::string_view source, std::string_view message) {
  if (auto* h = host(); h && h->log) h->log(h->ctx, level, borrow(source), borrow(message));
}
inline void metric(std::string_view name, double value) {
  if (auto* h = host(); h && h->metric) h->metric(h->ctx, borrow(name), value);
}
// True once the host is stopping the run: long loops poll this.
inline bool cancelled() {
  auto* h = host();
  return h && h->is_cancelled && h->is_cancelled(h->ctx) != 0;
}

// ---- Descriptor ----

// The compiler that built the plugin (the SDK fills build_info with it).
inline std::string_view build_info() {
#if defined(__clang__)
  return "clang " __clang_version__;
#elif defined(__GNUC__)
  return "gcc " __VERSION__;
#else
  return "unknown compiler";
#endif
}

namespace detail {
inline mlpt_component component(mlpt_component_kind kind, std::string_view name,
                                std::string_view description, const void* api, const void* caps) {
  mlpt_component c{};
  c.struct_size = MLPT_COMPONENT_STRUCT_SIZE;
  c.kind = kind;
  c.name = borrow(name);
  c.description = borrow(description);
  c.api = api;
  c.capabilities = caps;
  return c;
}
}  // namespace detail

// The entry point's body. `name`, `version` and every component's strings must be string literals
// or otherwise live until shutdown (the descriptor borrows them).
inline mlpt_error* plugin_init(mlpt_plugin_init_args* args, std::string_view name,
                               std::string_view version, std::vector<mlpt_component> components) {
  if (!args || args->struct_size < MLPT_PLUGIN_INIT_ARGS_STRUCT_SIZE)
    return make_error(MLPT_INVALID_ARGUMENT, std::string(name) + ": mlpt_plugin_init_args too small");
  host_slot().store(args->host, std::memory_order_release);
  args->descriptor = nullptr;
  if (args->host_abi_version.major != MLPT_ABI_VERSION_MAJOR) {
    log(MLPT_LOG_ERROR, name,
        "refusing host ABI " + std::to_string(args->host_abi_version.major) + "." +
            std::to_string(args->host_abi_version.minor) + ": this plugin speaks ABI " +
            std::to_string(MLPT_ABI_VERSION_MAJOR) + "." + std::to_string(MLPT_ABI_VERSION_MINOR));
    return nullptr;
  }
  static std::vector<mlpt_component> storage;
  static mlpt_plugin_descriptor descriptor;
  storage = std::move(components);
  descriptor = mlpt_plugin_descriptor{};
  descriptor.struct_size = MLPT_PLUGIN_DESCRIPTOR_STRUCT_SIZE;
  descriptor.abi_version = mlpt_abi_version{MLPT_ABI_VERSION_MAJOR, MLPT_ABI_VERSION_MINOR};
  descriptor.name = borrow(name);
  descriptor.version = borrow(version);
  descriptor.num_components = storage.size();
  descriptor.components = storage.data();
  descriptor.errors = *error_api();
  descriptor.shutdown = [] { host_slot().store(nullptr, std::memory_order_release); };
  descriptor.build_info = borrow(build_info());
  args->descriptor = &descriptor;
  return nullptr;
}

}  // namespace mlpt::sdk

#define MLPT_SDK_PLUGIN(name, version, ...)                                                  \
  extern "C" MLPT_EXPORT mlpt_error* mlpt_plugin_init(mlpt_plugin_init_args* args) {         \
    return ::mlpt::sdk::guard_init(args, [&] {                                               \
      return ::mlpt::sdk::plugin_init(args, name, version, {__VA_ARGS__});                   \
    });                                                                                      \
  }

namespace mlpt::sdk {
// Component constructors run inside the entry point: an exception there becomes an error.
template <class Body>
mlpt_error* guard_init(mlpt_plugin_init_args*, Body&& body) noexcept {
  mlpt_error* result = nullptr;
  mlpt_error* thrown = guard("mlpt_plugin_init", [&] { result = body(); });
  return thrown ? thrown : result;
}
}  // namespace mlpt::sdk
