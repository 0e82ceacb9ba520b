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

// How a tensor of a shard is spread over the model-parallel group: whole on every rank, split over
// the tensor-parallel group only (the same on every expert-parallel rank), or a routed expert
// tensor (split over the expert-parallel group, and over the tensor-parallel one when tp > 1).
// What a trainer needs to count every element of the whole model once (the gradient norm) and to
// keep the copies of a replicated tensor equal.
enum class TensorSpread { replicated = 0, tensor_split = 1, routed_experts = 2 };
std::vector<TensorSpread> tensor_spreads(const ModelLayout& shard, const ModelLayout& full);

// This rank's shard of checkpoint `dir`, reading only the slices it holds from the memory-mapped
// safetensors (read_shard_weights). A Qwen3-Next checkpoint is read whole, then sliced.
template <class T>
Weights<T> load_shard_weights(const std::string& dir, const ModelShard& shard);

// This rank's shard of the model `full` stored in `checkpoint` under Qwen3.5 names (each prefixed
// by `prefix`: an optimizer state's "exp_avg."), reading only the boxes of shard_placements: a
// tensor-parallel rank's rows, or the row segments of a column split, and its block of experts
// (fused, or one tensor per expert); replicated tensors whole. Each dtype converts to T as
// load_weights converts it (BF16 exactly, FP8 times its block scale). checkpoint.bytes_read()
// grows by the bytes of the boxes (and FP8 block scales) only.
template <class T>
Weights<T> read_shard_weights(const ModelConfig& full, const SafetensorsCheckpoint& checkpoint, const ModelShard& shard,
                              const std::string& prefix = "");

}  // namespace mlpt::ref
