// Gated DeltaNet recurrence (docs/qwen35-architecture.md §2.4.6-§2.4.7, backward §3): the CUDA
// counterpart of ../cpu/gdn.hpp. Everything is fp32 except v, out and d_v (bf16, the projections'
// precision): the state, q and k (after the fp32 L2 norms), g and beta (§7).
//
// Shapes (T = total tokens of a packed batch; sequence s is tokens [offsets[s], offsets[s+1]),
// offsets on the device):
//   q, k [T, Hk, dk] fp32 (normalised; q also scaled by dk^-1/2), v [T, Hv, dv] bf16,
//   g, beta [T, Hv] fp32, out [T, Hv, dv] bf16.
// States: `states` is NULL (every sequence starts from zero and nothing is written back) or a device
// array of num_seqs device pointers, each to one sequence's [Hv, dk, dv] fp32 state (NULL entries:
// start from zero, write nothing), read as the initial state and overwritten with the final one:
// a decode session's state lives in place.
// Value head h reads key head h / (Hv / Hk). Limits: dk <= 256 and dk * 64 * 4 bytes of state per
// block (checked).
#pragma once

#include "backends/cpu/gdn.hpp"
#include "backends/cuda/context.hpp"

namespace mlpt::ref::cuda {

using GdnShape = cpu::GdnShape;  // the CPU backend's shape (Hk, Hv, dk, dv)

// The token-by-token recurrence: the decode step (one token per sequence) and the definition.
// Each block owns (sequence, value head, 32 value columns): columns of the state evolve independently.
void gdn_recurrent_forward(const Context& ctx, const GdnShape& shape, const int64_t* offsets, int64_t num_seqs,
                           const float* q, const float* k, const bf16* v, const float* g, const float* beta,
                           float* const* states, bf16* out);

// The chunked form (chunk 64) for training and prefill; equal to the recurrence in exact arithmetic.
void gdn_chunked_forward(const Context& ctx, const GdnShape& shape, const int64_t* offsets, int64_t num_seqs,
                         const float* q, const float* k, const bf16* v, const float* g, const float* beta,
                         float* const* states, bf16* out);

// Gradients of sum(d_out * out) with respect to q, k (fp32), v (bf16), g and beta (fp32), all
// overwritten, for sequences starting from zero states (training). `host_offsets` is a host copy
// of the offsets (sizes the scratch: chunk-boundary states and one chunk of recomputed states per
// (sequence, head)). Recomputes the forward: a sweep keeps the state at every 64-token boundary,
// each chunk then recomputes its states and runs the adjoint of §3 backwards.
void gdn_backward(const Context& ctx, const GdnShape& shape, const int64_t* offsets, const int64_t* host_offsets,
                  int64_t num_seqs, const float* q, const float* k, const bf16* v, const float* g, const float* beta,
                  const bf16* d_out, float* d_q, float* d_k, bf16* d_v, float* d_g, float* d_beta,
                  DeviceBuffer& scratch);

}  // namespace mlpt::ref::cuda
