// The run's sink for what plugins report through host services `metric`: every name's latest value
// within a training step, taken into that step's record (metrics JSONL "plugins", the report).
#pragma once

#include <map>
#include <mutex>
#include <string>
#include <utility>

namespace mlpt::run {

class PluginMetrics {
 public:
  // Thread-safe (plugins call it from their own threads); never blocks for long.
  void record(const std::string& name, double value) {
    std::lock_guard lock(mutex_);
    step_[name] = value;
  }
  // The values reported since the last take (the latest per name), and starts the next step.
  std::map<std::string, double> take() {
    std::lock_guard lock(mutex_);
    return std::exchange(step_, {});
  }

 private:
  std::mutex mutex_;
  std::map<std::string, double> step_;
};

}  // namespace mlpt::run
