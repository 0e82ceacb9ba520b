// Gated DeltaNet recurrence (docs/qwen35-architecture.md §2.4.6-§2.4.7, backward §3): the sequence-mixing
// core of a GDN layer, after projections, conv, q/k L2 norms and gates. CPU reference backend.
//
// Shapes (T = total tokens of a packed batch; sequence s is tokens [offsets[s], offsets[s+1])):
//   q, k  [T, Hk, dk]   already normalised (q also scaled by dk^-1/2)
//   v     [T, Hv, dv]
//   g     [T, Hv]       log decay, <= 0 (alpha = exp(g))
//   beta  [T, Hv]       in (0, 1)
//   state [num_seqs, Hv, dk, dv]  one fp32 state per sequence and value head
// Value head h reads key head h / (Hv / Hk) (consecutive grouping). Every sequence starts from
// initial_state (NULL = zeros) and, when final_state is not NULL, its last state is written there.
// Templates are instantiated for float (the backend) and double (finite-difference tests).
#pragma once

#include "ops/shapes.hpp"

#include <cstddef>
#include <cstdint>

namespace mlpt::ref::cpu {

using GdnShape = ::mlpt::ref::GdnShape;  // ops/shapes.hpp

// The token-by-token recurrence: the definition, and the decode step (T = 1 per sequence).
template <class T>
void gdn_recurrent_forward(const GdnShape& shape, const int64_t* offsets, size_t num_seqs,
                           const T* q, const T* k, const T* v, const T* g, const T* beta,
                           const T* initial_state, T* out, T* final_state);

// The chunked form (chunk 64) for training and prefill; equal to the recurrence in exact arithmetic.
template <class T>
void gdn_chunked_forward(const GdnShape& shape, const int64_t* offsets, size_t num_seqs,
                         const T* q, const T* k, const T* v, const T* g, const T* beta,
                         const T* initial_state, T* out, T* final_state);

// Gradients of sum(d_out * out) (+ sum(d_final_state * final_state) when d_final_state is not NULL)
// with respect to q, k, v, g, beta and (when d_initial_state is not NULL) the initial state.
// Outputs are overwritten, not accumulated. Recomputes the forward internally (states at chunk
// boundaries are kept, the rest recomputed), so it needs only the forward's inputs.
template <class T>
void gdn_backward(const GdnShape& shape, const int64_t* offsets, size_t num_seqs, const T* q,
                  const T* k, const T* v, const T* g, const T* beta, const T* initial_state,
                  const T* d_out, const T* d_final_state, T* d_q, T* d_k, T* d_v, T* d_g, T* d_beta,
                  T* d_initial_state);

}  // namespace mlpt::ref::cpu
