// The slice of a model one rank of a tp × ep layout holds (model_parallel.hpp says what is split
// how). The shard's config carries the layout (ModelConfig::shard) and this rank's sizes, so the
// layer code runs unchanged on it.
#pragma once

#include <functional>
#include <vector>

#include "model/weights.hpp"

namespace mlpt::ref {

// The config of `shard`: heads and FFN widths divided by tp, KV heads replicated where tp exceeds
// them (the shard's kv_replicas set); every layer still listed (a pipeline stage runs its own,
// pipeline_stages.hpp). Throws naming the size that does not divide (e.g.
// "linear_num_key_heads 2 do not split over tp 4"), for experts over ep, and for more pipeline
// stages than layers.
ModelConfig shard_config(const ModelConfig& full, const ModelShard& shard);

// The layout of `shard`'s tensors for a model of config `full`: its config's (shard_config), the
// routed-expert tensors holding its block of num_experts / expert_blocks() experts, the embedding
// and LM head the rows of its vocabulary range (vocab_parallel.hpp), another pipeline stage's
// tensors empty (keep_stage_tensors).
ModelLayout shard_layout(const ModelConfig& full, const ModelShard& shard);

// Copies this rank's slices out of the full weights: a one-rank model, whose expert tensors hold
// every expert or already just this rank's block (load_weights with an expert range).
template <class T>
Weights<T> shard_weights(const Weights<T>& full, const ModelShard& shard);

// How a tensor of a shard is spread over the model-parallel group: whole on every rank, split over
// the tensor-parallel group only (the same on every expert-parallel rank), or a routed expert
// tensor (split over the expert-parallel group, and over the tensor-parallel one when tp > 1).
// What a trainer needs to count every element of the whole model once (the gradient norm) and to
// keep the copies of a replicated tensor equal. A replicated KV head's K and V weights are
// tensor_split on the first of its tensor-parallel replicas and `kv_copy` on the others: copies
// that count nowhere (and that the backward keeps equal to the first's).
enum class TensorSpread { replicated = 0, tensor_split = 1, routed_experts = 2, kv_copy = 3 };
std::vector<TensorSpread> tensor_spreads(const ModelConfig& shard, const ModelLayout& shard_layout,
                                         const ModelLayout& full);

// A gradient a shard's backward computes as a partial sum over its tensor-parallel group: the
// per-head norms every head shares (q_norm, k_norm, the GDN output norm: the whole tensor, slot 0
// of 1) and, with KV heads replicated, the K and V weights (slot tp_rank / kv_replicas of the
// model's num_kv_heads: a sum over the tensor-parallel group of every head's rows, each rank adding
// its share at its head's slot and zeros at the others, which sums each head over its replicas).
struct PartialTensor {
  int tensor;
  int64_t slot = 0, slots = 1;
};
std::vector<PartialTensor> partial_gradients(const ModelConfig& shard, const LayerTensors& layer);

// This rank's shard of checkpoint `dir`, reading only the slices it holds from the memory-mapped
// safetensors (read_shard_weights). A Qwen3-Next checkpoint is read whole, then sliced.
template <class T>
Weights<T> load_shard_weights(const std::string& dir, const ModelShard& shard);

// This rank's shard of the model `full` stored in `checkpoint` under Qwen3.5 names (each prefixed
// by `prefix`: an optimizer state's "exp_avg."), reading only the boxes of shard_placements: a
// tensor-parallel rank's rows, or the row segments of a column split, and its block of experts
// (fused, or one tensor per expert); replicated tensors whole. Each dtype converts to T as
// load_weights converts it (BF16 exactly, FP8 times its block scale). checkpoint.bytes_read()
// grows by the bytes of the boxes (and FP8 block scales) only. `keep`, when given, sees each
// tensor (its index, its values) as soon as it is read and may shrink it (a distributed
// optimizer keeps its range of a moment), so no more than one whole tensor is held beyond that.
template <class T>
Weights<T> read_shard_weights(const ModelConfig& full, const SafetensorsCheckpoint& checkpoint,
                              const ModelShard& shard, const std::string& prefix = "",
                              const std::function<void(size_t, std::vector<T>&)>& keep = {});

}  // namespace mlpt::ref
