#include "bench/coordinator_sim/engine_replica.hpp"

#include <algorithm>

namespace mlpt::coordinator_sim {

// Floating-point slack when deciding that a reply's last token is out.
constexpr double kTokenEpsilon = 1e-6;

void EngineReplica::advance(double now) {
  const double dt = now - last_;
  last_ = now;
  if (dt <= 0) return;
  if (paused_) {
    paused_s_ += dt;
    return;
  }
  if (decoding_.empty()) {
    idle_s_ += dt;
    return;
  }
  const double tokens = dt / step_s(decoding_.size());
  for (auto& r : decoding_) r.tokens_left -= tokens;
  sequence_s_ += dt * static_cast<double>(decoding_.size());
}

void EngineReplica::add(int64_t episode, double tokens) { decoding_.push_back({episode, tokens}); }

std::optional<double> EngineReplica::next_finish() const {
  if (decoding_.empty() || paused_) return std::nullopt;
  double least = decoding_.front().tokens_left;
  for (const auto& r : decoding_) least = std::min(least, r.tokens_left);
  return last_ + std::max(0.0, least) * step_s(decoding_.size());
}

std::vector<int64_t> EngineReplica::take_finished() {
  std::vector<int64_t> done;
  std::erase_if(decoding_, [&](const Reply& r) {
    if (r.tokens_left > kTokenEpsilon) return false;
    done.push_back(r.episode);
    return true;
  });
  return done;
}

}  // namespace mlpt::coordinator_sim
