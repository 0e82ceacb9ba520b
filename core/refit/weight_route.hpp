// The two ends of a weight version's way from the trainer to an engine, as the host composes them
// over the run's transport endpoints; every end is plugin to plugin through weight_flow, and the
// host holds no weights. Direct (below) uses the run's endpoints; SparseRefitSender/Receiver
// (sparse_refit_transport.hpp) the sparse transport's, wrapping them. Whoever delivers weights (one
// process, or a distributed run's ranks) holds one of each and never asks which.
#pragma once

#include <cstdint>
#include <string>

#include "core/components/instances.hpp"
#include "core/refit/refit_stats.hpp"
#include "core/refit/weight_flow.hpp"

namespace mlpt::refit {

struct SentVersion {
  uint64_t version = 0;
  RefitStats stats;
};

// The trainer's end.
class WeightSender {
 public:
  virtual ~WeightSender() = default;
  // Work on the version the trainer holds that may overlap generation, before the engines pause
  // (the trainer's weights must not change until send). Default: none.
  virtual void prepare(components::Trainer& trainer) { (void)trainer; }
  // Sends the version the trainer holds. Thread-safe against a fetch at the other end on another
  // thread (a transport may need both ends active at once).
  virtual SentVersion send(components::Trainer& trainer, int64_t timeout_ms) = 0;
};

// The engine's end.
class WeightReceiver {
 public:
  virtual ~WeightReceiver() = default;
  // The engine (paused by the caller) gets a version >= min_version and loads it; returns it.
  // Collective over an engine group: every rank calls it for every version.
  virtual uint64_t fetch(components::Engine& engine, uint64_t min_version, int64_t timeout_ms) = 0;
};

// Plugin to plugin: the trainer publishes, the engine fetches (weight_flow.hpp). `fallback` says
// why another route that was asked for is not taken; every version's stats carry it.
class DirectSender final : public WeightSender {
 public:
  explicit DirectSender(components::Transport& endpoint, std::string fallback = {})
      : endpoint_(endpoint), fallback_(std::move(fallback)) {}
  SentVersion send(components::Trainer& trainer, int64_t timeout_ms) override {
    const PublishResult published = publish(trainer, endpoint_, timeout_ms);
    SentVersion sent{published.version, RefitStats{"dense"}};
    sent.stats.bytes = sent.stats.dense_bytes = published.bytes;
    sent.stats.fallback = fallback_;
    return sent;
  }

 private:
  components::Transport& endpoint_;
  const std::string fallback_;
};

class DirectReceiver final : public WeightReceiver {
 public:
  explicit DirectReceiver(components::Transport& endpoint) : endpoint_(endpoint) {}
  uint64_t fetch(components::Engine& engine, uint64_t min_version, int64_t timeout_ms) override {
    return refit::fetch(engine, endpoint_, min_version, timeout_ms);
  }

 private:
  components::Transport& endpoint_;
};

}  // namespace mlpt::refit
