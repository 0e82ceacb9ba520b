#include "core/plugin/host_services.hpp"

#include <spdlog/spdlog.h>

#include <chrono>

#include "core/error.hpp"

namespace mlpt::plugin {
namespace {

// The host's layout of its own error objects (plugins have their own; never mixed).
struct HostError {
  mlpt_error_code code;
  std::string message;
};

std::string_view view(mlpt_string s) { return s.data ? std::string_view(s.data, s.size) : std::string_view(); }

const mlpt_error_api kHostErrors = {
    MLPT_ERROR_API_STRUCT_SIZE,
    [](mlpt_error* e) { delete reinterpret_cast<HostError*>(e); },
    [](const mlpt_error* e) { return reinterpret_cast<const HostError*>(e)->code; },
    [](const mlpt_error* e) {
      const auto& m = reinterpret_cast<const HostError*>(e)->message;
      return mlpt_string{m.data(), m.size()};
    },
};

}  // namespace

HostServices::HostServices(const std::atomic<bool>* stop_source) : stop_source_(stop_source) {
  table_.struct_size = MLPT_HOST_SERVICES_STRUCT_SIZE;
  table_.ctx = this;
  table_.abi_version = mlpt_abi_version{MLPT_ABI_VERSION_MAJOR, MLPT_ABI_VERSION_MINOR};
  table_.log = &log_fn;
  table_.metric = &metric_fn;
  table_.now_ns = &now_ns_fn;
  table_.is_cancelled = &is_cancelled_fn;
  table_.errors = kHostErrors;
  table_.extension_start = nullptr;
  set_rendezvous(std::make_unique<LocalRendezvous>());
  table_.kv_put = &kv_put_fn;
  table_.kv_get = &kv_get_fn;
  table_.barrier = &barrier_fn;
}

void HostServices::set_rendezvous(std::unique_ptr<Rendezvous> rendezvous) {
  rendezvous_ = std::move(rendezvous);
  table_.process = &rendezvous_->process();
}

void HostServices::set_metric_sink(std::function<void(const std::string&, double)> sink) {
  std::lock_guard lock(mutex_);
  metric_sink_ = std::move(sink);
}

void HostServices::begin_capture() {
  std::lock_guard lock(mutex_);
  capturing_ = true;
  captured_.clear();
}

std::string HostServices::end_capture() {
  std::lock_guard lock(mutex_);
  capturing_ = false;
  return std::move(captured_);
}

mlpt_error* HostServices::make_error(mlpt_error_code code, std::string message) {
  return reinterpret_cast<mlpt_error*>(new HostError{code, std::move(message)});
}

void HostServices::log_fn(void* ctx, mlpt_log_level level, mlpt_string source, mlpt_string message) {
  auto* self = static_cast<HostServices*>(ctx);
  auto src = view(source);
  auto msg = view(message);
  switch (level) {
    case MLPT_LOG_DEBUG: spdlog::debug("[{}] {}", src, msg); break;
    case MLPT_LOG_INFO: spdlog::info("[{}] {}", src, msg); break;
    case MLPT_LOG_WARNING: spdlog::warn("[{}] {}", src, msg); break;
    default: spdlog::error("[{}] {}", src, msg); break;
  }
  if (level >= MLPT_LOG_ERROR) {
    std::lock_guard lock(self->mutex_);
    if (self->capturing_) {
      if (!self->captured_.empty()) self->captured_ += "; ";
      self->captured_.append(msg);
    }
  }
}

void HostServices::metric_fn(void* ctx, mlpt_string name, double value) {
  auto* self = static_cast<HostServices*>(ctx);
  std::function<void(const std::string&, double)> sink;
  {
    std::lock_guard lock(self->mutex_);
    sink = self->metric_sink_;
  }
  if (sink) sink(std::string(view(name)), value);
}

uint64_t HostServices::now_ns_fn(void*) {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

namespace {
// Runs a rendezvous call for a plugin: what it throws becomes a host error object.
template <class Body>
mlpt_error* as_host_error(const char* what, Body&& body) noexcept {
  try {
    body();
    return nullptr;
  } catch (const Error& e) {
    return HostServices::make_error(e.code(), e.what());
  } catch (const std::exception& e) {
    return HostServices::make_error(MLPT_INTERNAL, std::string(what) + ": " + e.what());
  }
}
}  // namespace

mlpt_error* HostServices::kv_put_fn(void* ctx, mlpt_kv_put_args* a) {
  auto* self = static_cast<HostServices*>(ctx);
  return as_host_error("kv_put", [&] {
    if (!a || a->struct_size < MLPT_KV_PUT_ARGS_STRUCT_SIZE) throw Error(MLPT_INVALID_ARGUMENT, "kv_put: args too small");
    self->rendezvous_->put(std::string(view(a->key)), std::string(view(a->value)));
  });
}

mlpt_error* HostServices::kv_get_fn(void* ctx, mlpt_kv_get_args* a) {
  auto* self = static_cast<HostServices*>(ctx);
  return as_host_error("kv_get", [&] {
    if (!a || a->struct_size < MLPT_KV_GET_ARGS_STRUCT_SIZE) throw Error(MLPT_INVALID_ARGUMENT, "kv_get: args too small");
    std::string value = self->rendezvous_->get(std::string(view(a->key)), a->timeout_ms, self->cancelled_);
    if (a->value && a->value->write && !value.empty()) a->value->write(a->value->ctx, value.data(), value.size());
  });
}

mlpt_error* HostServices::barrier_fn(void* ctx, mlpt_barrier_args* a) {
  auto* self = static_cast<HostServices*>(ctx);
  return as_host_error("barrier", [&] {
    if (!a || a->struct_size < MLPT_BARRIER_ARGS_STRUCT_SIZE) throw Error(MLPT_INVALID_ARGUMENT, "barrier: args too small");
    self->rendezvous_->barrier(std::string(view(a->name)), a->timeout_ms, self->cancelled_);
  });
}

int HostServices::is_cancelled_fn(void* ctx) { return static_cast<HostServices*>(ctx)->cancelled() ? 1 : 0; }

}  // namespace mlpt::plugin
