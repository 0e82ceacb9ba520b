#include "bench/coordinator_sim/episode_draw.hpp"

#include <algorithm>
#include <cmath>
#include <random>

#include "core/rules/closed_division.hpp"

namespace mlpt::coordinator_sim {
namespace {

uint64_t mix(uint64_t x) {  // splitmix64's finaliser: nearby inputs give unrelated seeds
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

double draw(const LogNormal& d, std::mt19937_64& rng) {
  std::normal_distribution<double> normal(0.0, 1.0);
  return d.median * std::exp(d.sigma * normal(rng));
}

}  // namespace

EpisodeWork draw_episode(const EpisodeModel& m, uint64_t run_seed, int64_t prompt_index, int64_t sample_index,
                         bool validation) {
  std::mt19937_64 rng(mix(mix(mix(run_seed) ^ static_cast<uint64_t>(prompt_index)) ^ static_cast<uint64_t>(sample_index)) ^
                      (validation ? 1u : 0u));
  EpisodeWork w;
  w.sandbox_start_s = draw(m.sandbox_start_s, rng);
  const auto turns = std::clamp<int64_t>(std::llround(draw(m.turns, rng)), 1, rules::kMaxTurns);
  int64_t context = m.prompt_tokens;
  for (int64_t t = 0; t < turns && context < rules::kMaxSequenceLength; ++t) {
    const double reply = std::max(1.0, std::round(draw(m.reply_tokens, rng)));
    w.reply_tokens.push_back(reply);
    w.command_s.push_back(std::min(draw(m.command_s, rng), rules::kCommandTimeoutSeconds));
    context += static_cast<int64_t>(reply) + std::llround(draw(m.observation_tokens, rng));
  }
  w.tokens = std::min(context, rules::kMaxSequenceLength);
  w.test_s = std::min(draw(m.test_s, rng), validation ? rules::kValidationTestTimeoutSeconds : rules::kTestTimeoutSeconds);
  return w;
}

}  // namespace mlpt::coordinator_sim
