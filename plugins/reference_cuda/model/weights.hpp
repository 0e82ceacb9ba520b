// The model's parameters in working precision T (float for the backend, double for the
// finite-difference tests), ordered by ModelLayout; initialisation, checkpoint load and save.
#pragma once

#include <cstdint>
#include <set>
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

// Zero-filled tensors of the right shapes (gradients, optimizer moments): of config's layout, or of
// `layout` (a shard's, whose expert tensors hold only its block of experts while its config counts
// them all).
template <class T>
Weights<T> zeros_like_layout(const ModelConfig& config);
template <class T>
Weights<T> zeros_like_layout(const ModelConfig& config, const ModelLayout& layout);

// Deterministic initialisation from `seed` (docs/qwen35-architecture.md §2.2, §2.4.3, §2.4.8): each
// tensor draws from its own stream seeded by (seed, tensor name), so order does not matter. Drawn
// by `threads` workers (0: one per core); the values do not depend on how many.
template <class T>
Weights<T> init_weights(const ModelConfig& config, uint64_t seed, int threads = 0);

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

// A box (indices [offset[d], offset[d] + extent[d]) of every dimension d) of the model tensor
// `name` of `shape` (the whole model's shape) into `out`, row-major, reading only the box's bytes:
// from the tensor of that name, or, for routed experts stored one tensor per expert, from those.
// `name` may carry a prefix (an optimizer state's "exp_avg." names). Errors name the tensor.
template <class T>
void read_weight_box(const ModelConfig& config, const SafetensorsCheckpoint& checkpoint, const std::string& name,
                     const std::vector<int64_t>& shape, const std::vector<int64_t>& offset,
                     const std::vector<int64_t>& extent, T* out);

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

// The parts of save_checkpoint_as, for writers that hold only some tensors (a rank of a sharded
// save). A piece is a tensor to write, cut from a model tensor's values at `offset`.
struct TensorPiece {
  std::string name;
  std::vector<int64_t> shape;
  int64_t offset = 0;  // in elements
};
// The experts [first_expert, first_expert + count) of the fused routed-expert tensor `name`
// (…mlp.experts.gate_up_proj [count, 2I, H] or …down_proj [count, H, I]) as one tensor per expert
// (…experts.{e}.gate_proj.weight, up_proj, down_proj); empty when `name` is not one.
std::vector<TensorPiece> expert_pieces(const ModelConfig& config, const std::string& name, int64_t first_expert, int64_t count);
// How `source` stores model tensor `name` of `shape` (for routed experts, a block of shape[0]
// experts from first_expert): per expert where it has them so, else the tensor itself.
std::vector<TensorPiece> pieces_like_source(const SafetensorsCheckpoint& source, const ModelConfig& config,
                                            const std::string& name, const std::vector<int64_t>& shape,
                                            int64_t first_expert = 0);
// The piece's values (`values` + piece.offset) in the dtype `source` stores it in (`fallback`
// when it lacks it): one tensor, or FP8 and its block scale.
std::vector<EncodedTensor> encode_like_source(const SafetensorsCheckpoint& source, Dtype fallback, const TensorPiece& piece,
                                              const float* values);
// What encode_like_source makes of the piece (names, shapes, dtypes), without encoding it: for a
// writer that declares a file's tensors before it has their values.
std::vector<TensorDeclaration> declare_like_source(const SafetensorsCheckpoint& source, Dtype fallback, const TensorPiece& piece);
// Every name the model's tensors are written under like `source`: the source's other tensors are
// the ones a save copies byte for byte.
std::set<std::string> names_written_like_source(const SafetensorsCheckpoint& source, const ModelConfig& config);

template <class To, class From>
Weights<To> convert_weights(const Weights<From>& w) {
  Weights<To> out{w.config, w.layout, {}};
  out.values.reserve(w.values.size());
  for (const auto& v : w.values) out.values.emplace_back(v.begin(), v.end());
  return out;
}

}  // namespace mlpt::ref
