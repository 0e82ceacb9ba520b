// The plugin side of loading: the host services a plugin was given, logging through them, and the
// descriptor. A C++ plugin's whole entry point is:
//
//   MLPT_SDK_PLUGIN("my-plugin", "1.2.0",
//                   mlpt::sdk::engine_component<MyEngine>("my_engine", "what it is", &kMyCaps))
//
// which exports `mlpt_plugin_init`, refuses a host of another ABI major (with an error the host can
// destroy), and returns a descriptor built from the listed components. A host that declares an
// older minor (1.0, 1.1) gets the same tables: a 1.2 table begins with the older one (mlpt.h,
// Versions), and the plugin reads every field the host writes only up to the size the host declared.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
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

inline std::string version_text(mlpt_abi_version v) { return std::to_string(v.major) + "." + std::to_string(v.minor); }

// The version the host declared; 1.0 before the entry point ran.
inline mlpt_abi_version host_abi_version() {
  auto* h = host();
  return h ? h->abi_version : mlpt_abi_version{1, 0};
}

// Where this process runs; one process alone when the host is older than 1.2 (or absent).
inline mlpt_process_info process() {
  if (auto* h = host(); MLPT_HAS_FIELD(h, mlpt_host_services, process) && h->process) {
    mlpt_process_info p{MLPT_PROCESS_INFO_STRUCT_SIZE, 0, 1, 0, 1, 0, 1, MLPT_PROCESS_ROLE_ALL};
    std::memcpy(&p, h->process, std::min(sizeof(p), h->process->struct_size));
    p.struct_size = MLPT_PROCESS_INFO_STRUCT_SIZE;
    return p;
  }
  return mlpt_process_info{MLPT_PROCESS_INFO_STRUCT_SIZE, 0, 1, 0, 1, 0, 1, MLPT_PROCESS_ROLE_ALL};
}

// ---- Rendezvous: the host's key-value store (ABI 1.2) ----

// True when the host lends a key-value store (a host of ABI 1.2 or newer).
inline bool has_kv_store() {
  auto* h = host();
  return MLPT_HAS_FIELD(h, mlpt_host_services, barrier) && h->kv_put && h->kv_get && h->barrier;
}

// Throws MLPT_FAILED_PRECONDITION naming `who`, the store and the host's version unless the host
// lends a key-value store.
inline const mlpt_host_services& require_kv_store(std::string_view who) {
  if (!has_kv_store())
    throw Error(MLPT_FAILED_PRECONDITION,
                std::string(who) + " needs the host's key-value store (mlpt_host_services.kv_put, ABI 1.2); this host declares ABI " +
                    version_text(host_abi_version()));
  return *host();
}

namespace detail {
// Turns a host error into an sdk::Error (destroying it).
inline void check_host(const mlpt_host_services& h, mlpt_error* e) {
  if (!e) return;
  mlpt_error_code code = h.errors.error_code(e);
  std::string message = to_string(h.errors.error_message(e));
  h.errors.error_destroy(e);
  throw Error(code, message);
}
}  // namespace detail

// `who` names the caller in the error when the host has no store.
inline void kv_put(std::string_view who, std::string_view key, std::string_view value) {
  const auto& h = require_kv_store(who);
  mlpt_kv_put_args a{MLPT_KV_PUT_ARGS_STRUCT_SIZE, borrow(key), borrow(value)};
  detail::check_host(h, h.kv_put(h.ctx, &a));
}
inline std::string kv_get(std::string_view who, std::string_view key, int64_t timeout_ms) {
  const auto& h = require_kv_store(who);
  StringSink value;
  mlpt_kv_get_args a{MLPT_KV_GET_ARGS_STRUCT_SIZE, borrow(key), timeout_ms, value.sink()};
  detail::check_host(h, h.kv_get(h.ctx, &a));
  return value.take();
}
inline void barrier(std::string_view who, std::string_view name, int64_t timeout_ms) {
  const auto& h = require_kv_store(who);
  mlpt_barrier_args a{MLPT_BARRIER_ARGS_STRUCT_SIZE, borrow(name), timeout_ms};
  detail::check_host(h, h.barrier(h.ctx, &a));
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

// One component as the SDK lists it.
struct ComponentSpec {
  mlpt_component component;
};

namespace detail {
inline ComponentSpec component(mlpt_component_kind kind, std::string_view name, std::string_view description,
                               const void* api, const void* caps) {
  mlpt_component c{};
  c.struct_size = MLPT_COMPONENT_STRUCT_SIZE;
  c.kind = kind;
  c.name = borrow(name);
  c.description = borrow(description);
  c.api = api;
  c.capabilities = caps;
  return ComponentSpec{c};
}

inline mlpt_plugin_descriptor& descriptor_storage() {
  static mlpt_plugin_descriptor descriptor;
  return descriptor;
}

// Fills the descriptor's identity and error functions (what a refusal needs too).
inline mlpt_plugin_descriptor& descriptor_for(std::string_view name, std::string_view version) {
  auto& d = descriptor_storage();
  d = mlpt_plugin_descriptor{};
  d.struct_size = MLPT_PLUGIN_DESCRIPTOR_STRUCT_SIZE;
  d.abi_version = mlpt_abi_version{MLPT_ABI_VERSION_MAJOR, MLPT_ABI_VERSION_MINOR};
  d.name = borrow(name);
  d.version = borrow(version);
  d.errors = *error_api();
  d.shutdown = [] { host_slot().store(nullptr, std::memory_order_release); };
  d.build_info = borrow(build_info());
  d.extension_start = nullptr;
  return d;
}
}  // namespace detail

// The entry point's body. `name`, `version` and every component's strings must be string literals
// or otherwise live until shutdown (the descriptor borrows them).
inline mlpt_error* plugin_init(mlpt_plugin_init_args* args, std::string_view name,
                               std::string_view version, std::vector<ComponentSpec> components) {
  // Too small to hold even the 1.0 fields: there is nowhere to put a descriptor (the error leaks).
  if (!args || args->struct_size < MLPT_PLUGIN_INIT_ARGS_STRUCT_SIZE_1_0)
    return make_error(MLPT_INVALID_ARGUMENT, std::string(name) + ": mlpt_plugin_init_args is smaller than ABI 1.0's");
  host_slot().store(args->host, std::memory_order_release);
  auto& descriptor = detail::descriptor_for(name, version);
  args->descriptor = &descriptor;  // also when refusing: the host destroys the error with it
  const mlpt_abi_version host_version = args->host_abi_version;
  if (host_version.major != MLPT_ABI_VERSION_MAJOR)
    return make_error(MLPT_FAILED_PRECONDITION,
                      std::string(name) + " speaks ABI " + version_text(descriptor.abi_version) + " and refuses a host of ABI " +
                          version_text(host_version) + " (another major version: rebuild one of them)");
  static std::vector<mlpt_component> storage;
  storage.clear();
  for (const auto& spec : components) storage.push_back(spec.component);
  descriptor.num_components = storage.size();
  descriptor.components = storage.data();
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
