// The slice of a model one rank of a tp × ep layout holds (model_parallel.hpp says what is split
// how). The shard's config carries the layout (ModelConfig::shard) and this rank's sizes, so the
// layer code runs unchanged on it.
#pragma once

#include "model/weights.hpp"

namespace mlpt::ref {

// The config of `shard`: heads and FFN widths divided by tp. Throws naming the size that does not
// divide (e.g. "num_key_value_heads 2 do not split over tp 4"), and for experts over ep.
ModelConfig shard_config(const ModelConfig& full, const ModelShard& shard);

// Copies this rank's slices out of the full weights: a one-rank model, whose expert tensors hold
// every expert or already just this rank's block (load_weights with an expert range).
template <class T>
Weights<T> shard_weights(const Weights<T>& full, const ModelShard& shard);

// This rank's shard of checkpoint `dir`, reading only its block of the routed experts from the
// safetensors (by slice of the fused tensors, or by name one per expert); the other tensors are
// read whole and sliced in memory. A Qwen3-Next checkpoint is read whole, then sliced.
template <class T>
Weights<T> load_shard_weights(const std::string& dir, const ModelShard& shard);

}  // namespace mlpt::ref
