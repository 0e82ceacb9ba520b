// The Qwen3.5 MoE text model as computation (docs/qwen35-architecture.md §2-§3): forward of a packed
// batch of sequences, optionally continuing per-sequence generation caches, and the backward pass
// with per-layer recomputation. T is float (the backend) or double (gradient checks).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "model/parallel/stage_boundary.hpp"
#include "model/weights.hpp"

namespace mlpt::ref {

// What a sequence carries between generate steps (§4): per GDN layer the conv window (last K−1
// raw pre-conv inputs, [K−1, conv_dim]) and the recurrent state [Hv, dk, dv]; per attention layer
// the keys and values after norm and RoPE, [length, Hkv, head_dim]. Layers of the other kind keep
// empty vectors.
template <class T>
struct SequenceCache {
  explicit SequenceCache(const ModelConfig& config);
  std::vector<std::vector<T>> conv, state, keys, values;
  int64_t length = 0;  // tokens consumed so far
  size_t bytes() const;
};

enum class GdnMode { chunked, recurrent };

// One forward call. Segment s is tokens [offsets[s], offsets[s+1]); with caches[s] it continues
// that sequence (positions start at caches[s]->length, which advances) else it starts fresh.
template <class T>
struct ForwardBatch {
  const int32_t* tokens = nullptr;
  std::vector<int64_t> offsets{0};
  std::vector<SequenceCache<T>*> caches;  // empty, or one per segment (NULL entries allowed)
  // Shared prefixes: empty, or one per segment: -1, or the index of an earlier segment without a
  // parent that this one continues. A continuation starts where its parent ends (positions, GDN
  // state, conv window, attention keys and values), so a prefix shared by several sequences is
  // computed once; backward sums every continuation's gradient into it. Not with `caches`.
  std::vector<int32_t> parents;
  GdnMode gdn_mode = GdnMode::chunked;
  // [tokens, moe layers, k]: with replay, routing uses these experts (R3); routed_experts (out)
  // receives the experts each token used. Either may be NULL.
  const int16_t* replay_experts = nullptr;
  int16_t* routed_experts = nullptr;
  // Out, for backward: the residual stream entering every layer and the last one's output,
  // (num_layers + 1) x tokens x hidden (on a pipeline stage, of its layers). NULL skips saving.
  std::vector<T>* layer_inputs = nullptr;
  // Polled once per layer (forward and backward); true stops the pass with MLPT_CANCELLED. NULL: never.
  // A generation step leaves it NULL: its caches must not be left half-advanced.
  bool (*cancelled)() = nullptr;
  // The groups a sharded model computes with (weights from shard_weights); NULL for one rank.
  const ModelParallel* parallel = nullptr;
  // A pipeline stage's messages passed by the caller (float only): NULL, the stage exchanges them
  // with its neighbours itself. Read by forward_hidden and backward alike, each with its own.
  const StageBoundary* boundary = nullptr;

  int64_t num_tokens() const { return offsets.back(); }
  size_t num_segments() const { return offsets.size() - 1; }
  int32_t parent(size_t s) const { return parents.empty() ? -1 : parents[s]; }
};

// The final hidden states after the final norm, [tokens, hidden]. Throws on bad token ids or
// replayed experts, naming the position. On a shard every rank of the layout makes the same call
// with the same batch and gets the same hidden states (the full rows). A pipeline stage runs its
// layers only: a later stage first receives the residual stream from the previous one, a stage
// before the last sends its output to the next and returns an empty vector (blocking messages:
// every stage makes its calls in the same order); with batch.boundary it reads the residual stream
// from boundary->input and leaves its output in boundary->output instead.
template <class T>
std::vector<T> forward_hidden(const Weights<T>& weights, ForwardBatch<T>& batch);

// logits[rows, vocab] = hidden[rows, H] · W_lmᵀ; on a vocabulary-parallel shard the logits of its
// range only, [rows, vocab_range(vocab_size, shard).count()] (model/parallel/vocab_parallel.hpp).
template <class T>
void lm_head_forward(const Weights<T>& weights, int64_t rows, const T* hidden, T* logits);

// Backward of lm_head_forward: d_hidden[rows, H] = dlogits · W_lm (overwritten; summed over the TP
// group on a vocabulary-parallel shard, where dlogits is its range's), and grads' LM head +=
// dlogitsᵀ · hidden. `parallel`: the batch's groups (NULL: one rank).
template <class T>
void lm_head_backward(const Weights<T>& weights, const ModelParallel* parallel, int64_t rows,
                      const T* dlogits, const T* hidden, T* d_hidden, Weights<T>& grads);

struct BackwardOptions {
  bool router_grad = true;  // false: the router weight gets no gradient (frozen router)
};

// Backward of forward_hidden for a batch without caches (parents allowed): given d(final hidden) [tokens, H],
// accumulates parameter gradients into `grads` (except the LM head, which the loss handles).
// `layer_inputs` and `experts` ([tokens, layers, k]) are what the forward recorded; each layer's
// forward is recomputed from its input (activation recomputation) so only those are kept. On a
// shard every rank of the layout makes the call with the same batch and d_hidden: `grads` (a
// shard's shapes) receives this rank's slices, replicated tensors' gradients whole on every rank.
// A pipeline stage before the last receives d(its output) from the next stage instead of reading
// d_hidden (which may be NULL there), and a stage after the first sends d(its input) to the
// previous one; forward's order of calls, stage by stage. With batch.boundary: d(its output) read
// from boundary->input, d(its input) left in boundary->output.
template <class T>
void backward(const Weights<T>& weights, const ForwardBatch<T>& batch, const std::vector<T>& layer_inputs,
              const int16_t* experts, const T* d_hidden, Weights<T>& grads, const BackwardOptions& options);

}  // namespace mlpt::ref
