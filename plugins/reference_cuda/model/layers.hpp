// The three blocks of a decoder layer (GDN mixer, gated attention mixer, sparse MoE), forward with
// an optional tape of intermediates and backward from that tape. Internal to model/.
#pragma once

#include <cstdint>
#include <vector>

#include "model/model.hpp"

namespace mlpt::ref::detail {

// What every block needs to know about the call.
template <class T>
struct LayerContext {
  const ModelConfig& config;
  int64_t tokens;
  const std::vector<int64_t>& offsets;
  const std::vector<SequenceCache<T>*>& caches;  // empty or one per segment
  const std::vector<int64_t>& positions;         // per token
  GdnMode gdn_mode;
  int layer;
  const std::vector<int32_t>& parents;  // empty or one per segment (ForwardBatch::parents)
  const ModelParallel* parallel = nullptr;  // a shard's groups (ForwardBatch::parallel)
  size_t num_segments() const { return offsets.size() - 1; }
  SequenceCache<T>* cache(size_t s) const { return caches.empty() ? nullptr : caches[s]; }
  int32_t parent(size_t s) const { return parents.empty() ? -1 : parents[s]; }
  bool any_parent() const {
    for (int32_t p : parents)
      if (p >= 0) return true;
    return false;
  }
  bool any_cache() const {
    for (auto* c : caches)
      if (c) return true;
    return false;
  }
};

template <class T>
struct GdnTape {
  std::vector<T> xn, qkv, conv, q, k, v, z, a, b, g, beta, o, y;
  // With parents: the final recurrent state of every segment that has continuations, [Hv, dk, dv]
  // each at fork_slot[segment] (−1 for the others).
  std::vector<T> fork_state;
  std::vector<int64_t> fork_slot;
};
template <class T>
struct AttentionTape {
  std::vector<T> xn, qg, q_raw, k_raw, q, k, v, o, gated;
};
template <class T>
struct MoeTape {
  std::vector<T> xn, logits, weights, sg, su, sh, s_out, s_logit;
  std::vector<int16_t> experts;  // [tokens, k]
};

// out[tokens, H] = mixer(xn); the tape (when not NULL) keeps what backward needs.
template <class T>
void gdn_forward(const LayerContext<T>& ctx, const Weights<T>& w, const T* xn, T* out, GdnTape<T>* tape);
template <class T>
void gdn_backward(const LayerContext<T>& ctx, const Weights<T>& w, const GdnTape<T>& tape, const T* dout, T* dxn,
                  Weights<T>& grads);

template <class T>
void attention_forward(const LayerContext<T>& ctx, const Weights<T>& w, const T* xn, T* out, AttentionTape<T>* tape);
template <class T>
void attention_backward(const LayerContext<T>& ctx, const Weights<T>& w, const AttentionTape<T>& tape,
                        const T* dout, T* dxn, Weights<T>& grads);

// out[tokens, H] = MoE(xn). `replay` / `record` are [tokens, k] for this layer (NULL allowed).
template <class T>
void moe_forward(const LayerContext<T>& ctx, const Weights<T>& w, const T* xn, const int16_t* replay,
                 int16_t* record, T* out, MoeTape<T>* tape);
template <class T>
void moe_backward(const LayerContext<T>& ctx, const Weights<T>& w, const MoeTape<T>& tape, const T* dout, T* dxn,
                  Weights<T>& grads, bool router_grad);

}  // namespace mlpt::ref::detail
