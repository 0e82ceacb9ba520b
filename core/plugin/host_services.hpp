// The host services every plugin receives (mlpt_host_services): logging into spdlog, metrics into a
// sink the run installs, the monotonic clock, the run-wide cancellation flag (set by cancel() or by the
// process's interrupt flag it follows: one source for every plugin), and (ABI 1.2) the process
// description and key-value store of a Rendezvous (one process alone by default).
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "core/plugin/rendezvous.hpp"
#include "mlpt/mlpt.h"

namespace mlpt::plugin {

class HostServices {
 public:
  // `stop_source`, when given, is a flag that also cancels (e.g. the signal handler's); it must outlive this object.
  explicit HostServices(const std::atomic<bool>* stop_source = nullptr);
  HostServices(const HostServices&) = delete;
  HostServices& operator=(const HostServices&) = delete;

  // The table to pass to plugins; lives as long as this object.
  const mlpt_host_services* table() const { return &table_; }

  // Where plugin metrics go (the run's metrics file); default: dropped after a debug log.
  void set_metric_sink(std::function<void(const std::string&, double)> sink);

  // Where this process runs and how it meets the others; set by the launcher before any plugin
  // loads (default: LocalRendezvous).
  void set_rendezvous(std::unique_ptr<Rendezvous> rendezvous);
  Rendezvous& rendezvous() { return *rendezvous_; }

  void cancel() { cancelled_.store(true); }
  bool cancelled() const { return cancelled_.load() || (stop_source_ && stop_source_->load()); }

  // While capturing, error-level plugin log messages are also kept, so that a plugin's reason for
  // refusing to load can be put into the loader's error message.
  void begin_capture();
  std::string end_capture();

  // Creates an error object owned by the host (destroyed by table()->errors).
  static mlpt_error* make_error(mlpt_error_code code, std::string message);

 private:
  static void log_fn(void* ctx, mlpt_log_level level, mlpt_string source, mlpt_string message);
  static void metric_fn(void* ctx, mlpt_string name, double value);
  static uint64_t now_ns_fn(void* ctx);
  static int is_cancelled_fn(void* ctx);
  static mlpt_error* kv_put_fn(void* ctx, mlpt_kv_put_args* args);
  static mlpt_error* kv_get_fn(void* ctx, mlpt_kv_get_args* args);
  static mlpt_error* barrier_fn(void* ctx, mlpt_barrier_args* args);

  mlpt_host_services table_{};
  std::atomic<bool> cancelled_{false};
  std::unique_ptr<Rendezvous> rendezvous_;
  const std::atomic<bool>* stop_source_ = nullptr;
  std::mutex mutex_;
  std::function<void(const std::string&, double)> metric_sink_;
  bool capturing_ = false;
  std::string captured_;
};

}  // namespace mlpt::plugin
