#include "core/plugin/host_services.hpp"

#include <spdlog/spdlog.h>

#include <chrono>

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

HostServices::HostServices() {
  table_.struct_size = MLPT_HOST_SERVICES_STRUCT_SIZE;
  table_.ctx = this;
  table_.abi_version = mlpt_abi_version{MLPT_ABI_VERSION_MAJOR, MLPT_ABI_VERSION_MINOR};
  table_.log = &log_fn;
  table_.metric = &metric_fn;
  table_.now_ns = &now_ns_fn;
  table_.is_cancelled = &is_cancelled_fn;
  table_.errors = kHostErrors;
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

int HostServices::is_cancelled_fn(void* ctx) { return static_cast<HostServices*>(ctx)->cancelled() ? 1 : 0; }

}  // namespace mlpt::plugin
