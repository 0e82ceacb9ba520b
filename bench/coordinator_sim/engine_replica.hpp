// A timed stand-in for one inference engine replica under continuous batching: every sequence in
// the batch advances one token per decode step, and a step takes longer the more sequences share
// it. The replica keeps the time it spent with nothing to decode (its GPUs idle), the time it was
// paused for a refit (loading weights, not idle) and the time-weighted batch size.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "bench/coordinator_sim/simulation_model.hpp"

namespace mlpt::coordinator_sim {

class EngineReplica {
 public:
  explicit EngineReplica(const EngineModel& model) : model_(model) {}

  // Brings the replica's accounting and every sequence's progress up to `now`.
  void advance(double now);
  // A reply of `tokens` for `episode` joins the batch (call advance(now) first).
  void add(int64_t episode, double tokens);
  // A refit: replies in the batch make no progress until resume (call advance(now) first).
  void pause() { paused_ = true; }
  void resume() { paused_ = false; }
  // The time the next reply finishes if the batch does not change; nullopt when idle or paused.
  std::optional<double> next_finish() const;
  // Removes and returns the replies finished at the current time (call advance(now) first).
  std::vector<int64_t> take_finished();

  size_t batch() const { return decoding_.size(); }
  size_t episodes = 0;  // episodes placed on this replica (the coordinator balances on it)
  double idle_s() const { return idle_s_; }
  double paused_s() const { return paused_s_; }
  double sequence_s() const { return sequence_s_; }  // integral of the batch size over time

 private:
  double step_s(size_t batch) const { return model_.step_s + model_.per_sequence_s * static_cast<double>(batch); }
  struct Reply {
    int64_t episode;
    double tokens_left;
  };
  EngineModel model_;
  std::vector<Reply> decoding_;
  bool paused_ = false;
  double last_ = 0, idle_s_ = 0, paused_s_ = 0, sequence_s_ = 0;
};

}  // namespace mlpt::coordinator_sim
