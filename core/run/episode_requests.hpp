// The request of one rollout of the run: its task row and image, its sampling (the training or
// validation temperature and top-p, and a seed that depends only on the run seed and the
// rollout's place in the data order, so a resumed run samples the same way) and its limits.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>

#include "core/rollout/episode.hpp"
#include "core/run/dataset.hpp"
#include "core/run/run_config.hpp"

namespace mlpt::run {

uint64_t rollout_seed(int64_t run_seed, int64_t prompt_index, int32_t sample, bool validation);

// Row `row_index` of `data`, which must outlive the episode (the request points at the row).
rollout::EpisodeRequest episode_request(const RunConfig& config, const Dataset& data, size_t row_index,
                                        int64_t prompt_index, int32_t sample, bool validation, uint64_t id);

}  // namespace mlpt::run
