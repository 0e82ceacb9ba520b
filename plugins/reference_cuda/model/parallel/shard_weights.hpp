// The slice of a model one rank of a tp × ep layout holds (model_parallel.hpp says what is split
// how). The shard's config carries the layout (ModelConfig::shard) and this rank's sizes, so the
// layer code runs unchanged on it.
#pragma once

#include "model/weights.hpp"

namespace mlpt::ref {

// The config of `shard`: heads and FFN widths divided by tp. Throws naming the size that does not
// divide (e.g. "num_key_value_heads 2 do not split over tp 4"), and for experts over ep.
ModelConfig shard_config(const ModelConfig& full, const ModelShard& shard);

// Copies this rank's slices out of the full weights (the full model must be one rank's).
template <class T>
Weights<T> shard_weights(const Weights<T>& full, const ModelShard& shard);

}  // namespace mlpt::ref
