// Pipeline parallelism's cut of the model (model_parallel.hpp): which layers, and so which tensors,
// each of pp stages holds. One function for everything that places a stage: the forward and
// backward (which layers run), the shard's layout (which tensors it holds), the trainer's state
// files and the memory plan.
#pragma once

#include <cstdint>
#include <vector>

#include "model/layout.hpp"
#include "model/parallel/model_parallel.hpp"

namespace mlpt::ref {

// Layers [first, end) of a stage.
struct StageLayers {
  int64_t first = 0, end = 0;
  int64_t count() const { return end - first; }
};

// Stage `stage` of `stages` over `num_layers` layers: contiguous runs as equal as the layer count
// allows, the earlier stages taking the one extra layer where it does not divide (the last stage
// also runs the final norm and the LM head). Throws MLPT_INVALID_ARGUMENT naming pipeline_parallel
// when there are more stages than layers.
StageLayers stage_layers(int64_t num_layers, int stages, int stage);
inline StageLayers stage_layers(int64_t num_layers, const ModelShard& shard) {
  return stage_layers(num_layers, shard.pp, shard.pp_rank);
}

// Whether `shard`'s stage holds each tensor of `layout` (a model's or a shard's layout: the same
// tensors in the same order): its layers' tensors, the embedding on the first stage, the final norm
// and the LM head on the last. All of them with one stage.
std::vector<bool> stage_tensors(const ModelLayout& layout, const ModelShard& shard);

// The tensors `shard`'s stage does not hold made empty in `layout` (shape[0] = 0): the stage's
// weights, gradients and moments keep every tensor's index and name, with no values for the
// other stages' tensors.
void keep_stage_tensors(ModelLayout& layout, const ModelShard& shard);

}  // namespace mlpt::ref
