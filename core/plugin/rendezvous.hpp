// Where this process runs among the run's processes, and the key-value store and barrier that
// plugins rendezvous through (mlpt_host_services since ABI 1.2). The launcher chooses the
// implementation; one process alone gets LocalRendezvous. A multi-process launcher (MPI) implements
// the same interface.
#pragma once

#include <atomic>
#include <condition_variable>
#include <map>
#include <mutex>
#include <string>

#include "mlpt/mlpt.h"

namespace mlpt::plugin {

class Rendezvous {
 public:
  virtual ~Rendezvous() = default;
  virtual const mlpt_process_info& process() const = 0;
  // Keys are written once; the same value again is fine, another is MLPT_ALREADY_EXISTS.
  virtual void put(const std::string& key, const std::string& value) = 0;
  // Waits for `key` (timeout_ms < 0: no limit); throws MLPT_DEADLINE_EXCEEDED naming the key, or
  // MLPT_CANCELLED soon after `cancelled` becomes true.
  virtual std::string get(const std::string& key, int64_t timeout_ms, const std::atomic<bool>& cancelled) = 0;
  // Returns once every process of the run entered the barrier `name`; same errors as get.
  virtual void barrier(const std::string& name, int64_t timeout_ms, const std::atomic<bool>& cancelled) = 0;
};

// One process: rank 0 of 1, role "all"; the store is a map, a barrier is passed at once.
class LocalRendezvous final : public Rendezvous {
 public:
  LocalRendezvous();
  const mlpt_process_info& process() const override { return process_; }
  void put(const std::string& key, const std::string& value) override;
  std::string get(const std::string& key, int64_t timeout_ms, const std::atomic<bool>& cancelled) override;
  void barrier(const std::string& name, int64_t timeout_ms, const std::atomic<bool>& cancelled) override;

 private:
  mlpt_process_info process_{};
  std::mutex mutex_;
  std::condition_variable changed_;
  std::map<std::string, std::string> values_;
};

}  // namespace mlpt::plugin
