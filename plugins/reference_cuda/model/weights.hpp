// The model's parameters in working precision T (float for the backend, double for the
// finite-difference tests), ordered by ModelLayout; initialisation, checkpoint load and save.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/config.hpp"
#include "model/layout.hpp"
#include "model/safetensors.hpp"

namespace mlpt::ref {

template <class T>
struct Weights {
  ModelConfig config;
  ModelLayout layout;
  std::vector<std::vector<T>> values;  // one per layout tensor

  T* operator[](int i) { return values[i].data(); }
  const T* operator[](int i) const { return values[i].data(); }
};

// Zero-filled tensors of the right shapes (gradients, optimizer moments).
template <class T>
Weights<T> zeros_like_layout(const ModelConfig& config);

// Deterministic initialisation from `seed` (qwen35-architecture.md §2.2, §2.4.3, §2.4.8): each
// tensor draws from its own stream seeded by (seed, tensor name), so order does not matter.
template <class T>
Weights<T> init_weights(const ModelConfig& config, uint64_t seed);

// Loads DIR/config.json and the safetensors of DIR (Qwen3.5 names, fused or one tensor per expert,
// or Qwen3-Next's fused layout, converted; FP8 block-scaled tensors dequantised). Every tensor the model needs must be there with its shape; errors name it.
template <class T>
Weights<T> load_weights(const std::string& dir);
template <class T>
Weights<T> load_weights(const ModelConfig& config, const SafetensorsCheckpoint& checkpoint);
// The same with only the routed experts [first_expert, first_expert + expert_count) of every layer
// read (a rank's block under expert parallelism: the bulk of a large MoE's bytes); the expert
// tensors' layout shape[0] is expert_count. Qwen3.5 names (fused or one tensor per expert).
template <class T>
Weights<T> load_weights(const ModelConfig& config, const SafetensorsCheckpoint& checkpoint, int64_t first_expert,
                        int64_t expert_count);

// Writes config.json and the weights (Qwen3.5 names) into `dir` in `dtype`.
void save_checkpoint(const std::string& dir, const Weights<float>& weights, Dtype dtype,
                     size_t max_shard_bytes = 0);

// Writes config.json and the weights into `dir` the way `source` (the checkpoint they came from)
// stores them, so that HF transformers and vLLM load it like the original: every tensor in its
// source dtype (FP8 re-quantised with fresh block scales), per-expert names where the source had
// them, and every source tensor the model does not use (mtp.*, model.visual.*) copied byte for
// byte. Tensors the source lacks are written in the config's dtype.
void save_checkpoint_as(const std::string& dir, const Weights<float>& weights, const SafetensorsCheckpoint& source,
                        size_t max_shard_bytes = 0);

template <class To, class From>
Weights<To> convert_weights(const Weights<From>& w) {
  Weights<To> out{w.config, w.layout, {}};
  out.values.reserve(w.values.size());
  for (const auto& v : w.values) out.values.emplace_back(v.begin(), v.end());
  return out;
}

}  // namespace mlpt::ref
