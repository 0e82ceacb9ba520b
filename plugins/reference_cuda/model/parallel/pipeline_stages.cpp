#include "model/parallel/pipeline_stages.hpp"

#include <algorithm>
#include <string>

#include "mlpt/sdk/error.hpp"

namespace mlpt::ref {

StageLayers stage_layers(int64_t num_layers, int stages, int stage) {
  if (stages < 1 || stage < 0 || stage >= stages)
    throw sdk::Error(MLPT_INVALID_ARGUMENT,
                     "pipeline_parallel: stage " + std::to_string(stage) + " of " + std::to_string(stages));
  if (stages > num_layers)
    throw sdk::Error(MLPT_INVALID_ARGUMENT, "pipeline_parallel " + std::to_string(stages) +
                                                " exceeds num_hidden_layers " + std::to_string(num_layers) +
                                                " (each stage needs a layer at least)");
  const int64_t base = num_layers / stages, extra = num_layers % stages;
  const int64_t first = stage * base + std::min<int64_t>(stage, extra);
  return {first, first + base + (stage < extra ? 1 : 0)};
}

std::vector<bool> stage_tensors(const ModelLayout& layout, const ModelShard& shard) {
  std::vector<bool> held(layout.tensors.size(), shard.pp == 1);
  if (shard.pp == 1) return held;
  const int64_t num_layers = static_cast<int64_t>(layout.layers.size());
  const StageLayers mine = stage_layers(num_layers, shard);
  // make_layout adds the embedding, each layer's tensors in turn, then the final norm and the LM
  // head: a stage's layers are one run of indices.
  const int begin = layout.layers[static_cast<size_t>(mine.first)].input_norm;
  const int end =
      mine.end < num_layers ? layout.layers[static_cast<size_t>(mine.end)].input_norm : layout.final_norm;
  for (int i = begin; i < end; ++i) held[static_cast<size_t>(i)] = true;
  if (shard.first_stage()) held[static_cast<size_t>(layout.embed)] = true;
  if (shard.last_stage())
    held[static_cast<size_t>(layout.final_norm)] = held[static_cast<size_t>(layout.lm_head)] = true;
  return held;
}

void keep_stage_tensors(ModelLayout& layout, const ModelShard& shard) {
  const std::vector<bool> held = stage_tensors(layout, shard);
  for (size_t i = 0; i < held.size(); ++i)
    if (!held[i]) layout.tensors[i].shape[0] = 0;
}

}  // namespace mlpt::ref
