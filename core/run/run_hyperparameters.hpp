// What the result log's init block says of a run (mllog/init_block.hpp): the closed division's
// values for its batch size, with the run config's seed, submission keys, sampling, limits and
// loss settings, and the sizes of its data.
#pragma once

#include <cstdint>
#include <optional>

#include "core/mllog/init_block.hpp"
#include "core/run/run_config.hpp"

namespace mlpt::run {

// The steps a run takes at most: [benchmark] max_steps, else the reference's for the table's batch
// sizes (30/20/10), else one pass over the `train_rows` training rows in their fixed order.
int64_t run_max_steps(const BenchmarkSettings& benchmark, size_t train_rows);

// `resumed_from_step`: the checkpoint a resumed run starts from.
mllog::RunHyperparameters run_hyperparameters(const RunConfig& config, int64_t max_steps, size_t train_rows,
                                              size_t validation_rows,
                                              std::optional<int64_t> resumed_from_step);

}  // namespace mlpt::run
