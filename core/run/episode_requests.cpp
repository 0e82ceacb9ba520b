#include "core/run/episode_requests.hpp"

namespace mlpt::run {

uint64_t rollout_seed(int64_t run_seed, int64_t prompt_index, int32_t sample, bool validation) {
  uint64_t x = static_cast<uint64_t>(run_seed) * 0x9E3779B97F4A7C15ull ^
               static_cast<uint64_t>(prompt_index) * 0xBF58476D1CE4E5B9ull ^
               static_cast<uint64_t>(sample) * 0x94D049BB133111EBull ^
               (validation ? 0xD6E8FEB86659FD93ull : 0);
  x ^= x >> 31;
  x *= 0x7FB5D7ED6A4B3C29ull;
  return x ^ (x >> 29);
}

rollout::EpisodeRequest episode_request(const RunConfig& config, const Dataset& data, size_t row_index,
                                        int64_t prompt_index, int32_t sample, bool validation, uint64_t id) {
  const auto& b = config.benchmark;
  rollout::EpisodeRequest r;
  r.task = &data.rows[row_index];
  r.image = data.image(row_index, config.dataset.images);
  r.prompt_index = prompt_index;
  r.sample_index = sample;
  r.sampling =
      mlpt_sampling_params{MLPT_SAMPLING_PARAMS_STRUCT_SIZE,
                           static_cast<float>(validation ? b.validation_temperature : b.training_temperature),
                           static_cast<float>(validation ? b.validation_top_p : b.training_top_p), 0,
                           rollout_seed(config.run.seed, prompt_index, sample, validation)};
  r.id = id;
  r.limits = rollout::EpisodeLimits{
      b.max_turns,       b.max_sequence_length, b.max_new_tokens_per_turn,
      b.agent_timeout_s, b.command_timeout_s,   validation ? b.validation_test_timeout_s : b.test_timeout_s};
  return r;
}

}  // namespace mlpt::run
