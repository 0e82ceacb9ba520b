// Causal multi-head attention with grouped KV heads (docs/qwen35-architecture.md §2.5), after q/k norms
// and RoPE and before the output gate. CPU reference backend.
//
// Packed sequences: sequence s has new queries q[q_offsets[s] .. q_offsets[s+1]) and keys/values
// kv[kv_offsets[s] .. kv_offsets[s+1]); the new queries are the LAST tokens of the sequence, so
// query i of sequence s (0-based among its new queries) attends to the kv positions
// 0 .. (kv_len - q_len + i) of that sequence. kv_len == q_len is training / full prefill; a longer kv
// is decode or a session's next turn over a KV cache.
//   q [Tq, H, D], k and v [Tkv, Hkv, D], out [Tq, H, D]; head h uses kv head h / (H / Hkv).
// Scale 1/sqrt(D); softmax in the working precision with max subtraction (fp32 at least).
// Templates are instantiated for float and double.
#pragma once

#include "ops/shapes.hpp"

#include <cstddef>
#include <cstdint>

namespace mlpt::ref::cpu {

using AttentionShape = ::mlpt::ref::AttentionShape;  // ops/shapes.hpp

template <class T>
void attention_forward(const AttentionShape& shape, const int64_t* q_offsets,
                       const int64_t* kv_offsets, size_t num_seqs, const T* q, const T* k,
                       const T* v, T* out);

// Gradients of sum(d_out * out) w.r.t. q, k, v (overwritten). Recomputes softmax rows (as flash
// attention's backward does) instead of storing them.
template <class T>
void attention_backward(const AttentionShape& shape, const int64_t* q_offsets,
                        const int64_t* kv_offsets, size_t num_seqs, const T* q, const T* k,
                        const T* v, const T* d_out, T* d_q, T* d_k, T* d_v);

}  // namespace mlpt::ref::cpu
