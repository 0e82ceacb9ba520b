#include "bench/coordinator_sim/simulation_table.hpp"

#include <algorithm>
#include <cstdio>

namespace mlpt::coordinator_sim {
namespace {

std::string format(const char* pattern, auto... values) {
  char text[512];
  std::snprintf(text, sizeof text, pattern, values...);
  return text;
}

struct Summary {
  double step_mean = 0, step_p90 = 0, wait = 0, train = 0, drain = 0, refit = 0, validation = 0;
};

Summary summarise(const SimulationResult& r) {
  Summary s;
  std::vector<double> steps;
  for (const auto& t : r.steps) {
    steps.push_back(t.step_s());
    s.wait += t.wait_s, s.train += t.train_s, s.drain += t.drain_s, s.refit += t.refit_s, s.validation += t.validation_s;
  }
  const double n = static_cast<double>(std::max<size_t>(1, steps.size()));
  std::sort(steps.begin(), steps.end());
  for (double x : steps) s.step_mean += x / n;
  if (!steps.empty()) s.step_p90 = steps[static_cast<size_t>(0.9 * static_cast<double>(steps.size() - 1))];
  s.wait /= n, s.train /= n, s.drain /= n, s.refit /= n;
  s.validation /= static_cast<double>(std::max<int64_t>(1, r.validations));
  return s;
}

std::string staleness(const SimulationResult& r) {
  std::string out;
  for (const auto& [age, count] : r.staleness) out += (out.empty() ? "" : " / ") + format("%llu: %lld", (unsigned long long)age, (long long)count);
  if (r.mixed_version > 0) out += format(" (%lld of several versions)", (long long)r.mixed_version);
  return out;
}

}  // namespace

std::string markdown_table(const std::vector<SimulationResult>& results, const SimulationModel& m, uint64_t seed) {
  std::string out = "# mlpt coordinator SIMULATION (timed stand-ins, not a measurement)\n\n";
  if (!results.empty()) {
    const auto& p = results.front().placement;
    out += format("%lld nodes x %lld GPUs, %lld concurrent episodes, %lld prompts x %lld rollouts per step, "
                  "max_trajectory_age_steps %lld, %s, %lld steps, pass@4 validation on %lld tasks, seed %llu.\n",
                  (long long)p.nodes, (long long)p.gpus_per_node, (long long)p.concurrent_episodes, (long long)m.loop.prompts_per_step,
                  (long long)m.loop.generations_per_prompt, (long long)m.loop.max_trajectory_age_steps,
                  m.loop.in_flight_weight_updates ? "weights updated in flight (episodes keep running)" : "every refit drains the episodes in flight",
                  (long long)m.loop.steps,
                  (long long)m.loop.validation_tasks, (unsigned long long)seed);
  }
  out += format("Episode: turns lognormal(median %.0f, sigma %.2f) <= 30; reply tokens lognormal(%.0f, %.2f); command s "
                "lognormal(%.1f, %.2f) <= 300; test s lognormal(%.0f, %.2f). Engine replica of %lld GPUs: decode step "
                "%.1f ms + %.2f ms per sequence. Trainer: %.0f TFLOP/s per GPU, refit %.0f s.\n\n",
                m.episode.turns.median, m.episode.turns.sigma, m.episode.reply_tokens.median, m.episode.reply_tokens.sigma,
                m.episode.command_s.median, m.episode.command_s.sigma, m.episode.test_s.median, m.episode.test_s.sigma,
                (long long)m.engine.gpus_per_replica, m.engine.step_s * 1e3, m.engine.per_sequence_s * 1e3,
                m.trainer.flops_per_gpu / 1e12, m.trainer.refit_s);
  out += "| trainer nodes | engine nodes (replicas) | step s, mean (p90) | per step: wait / train / drain / refit s | "
         "validation s each (count) | trainer GPU idle | engine GPU idle | decode batch | staleness: trajectories | total min |\n";
  out += "|---|---|---|---|---|---|---|---|---|---|\n";
  for (const auto& r : results) {
    const auto s = summarise(r);
    const auto& p = r.placement;
    out += format("| %lld | %lld (%lld) | %.0f (%.0f) | %.0f / %.0f / %.0f / %.0f | %.0f (%lld) | %.0f%% | %.0f%% | %.1f | %s | %.0f |\n",
                  (long long)p.trainer_nodes, (long long)(p.nodes - p.trainer_nodes), (long long)r.engine_replicas, s.step_mean,
                  s.step_p90, s.wait, s.train, s.drain, s.refit, s.validation, (long long)r.validations,
                  100 * r.trainer_idle_fraction, 100 * r.engine_idle_fraction, r.mean_decode_batch, staleness(r).c_str(),
                  r.wall_s / 60);
  }
  return out;
}

std::string csv_table(const std::vector<SimulationResult>& results) {
  std::string out = "# mlpt coordinator SIMULATION (timed stand-ins, not a measurement)\n"
                    "trainer_nodes,engine_nodes,engine_replicas,step,wait_s,train_s,drain_s,refit_s,validation_s,sequences,tokens,max_staleness\n";
  for (const auto& r : results) {
    const auto& p = r.placement;
    for (size_t i = 0; i < r.steps.size(); ++i) {
      const auto& t = r.steps[i];
      out += format("%lld,%lld,%lld,%zu,%.3f,%.3f,%.3f,%.3f,%.3f,%lld,%lld,%llu\n", (long long)p.trainer_nodes,
                    (long long)(p.nodes - p.trainer_nodes), (long long)r.engine_replicas, i + 1, t.wait_s, t.train_s, t.drain_s,
                    t.refit_s, t.validation_s, (long long)t.sequences, (long long)t.tokens, (unsigned long long)t.max_staleness);
    }
  }
  return out;
}

}  // namespace mlpt::coordinator_sim
