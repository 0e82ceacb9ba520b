// Pointwise activations and gates (docs/qwen35-architecture.md §2.4.3, §2.5, §2.6; backward §3), the
// CUDA counterparts of ../cpu/activations.hpp with the same arguments plus the context. Backward
// functions overwrite input gradients and accumulate (+=) into parameter gradients (fp32).
#pragma once

#include "backends/cuda/context.hpp"

namespace mlpt::ref::cuda {

// GDN gates per token and value head, fp32 (§7): beta = σ(b); g = −exp(A_log) · softplus(a + dt_bias).
// a, b [rows, Hv] bf16 (projection outputs); A_log, dt_bias [Hv] fp32; g, beta [rows, Hv] fp32.
void gdn_gates_forward(const Context& ctx, int64_t rows, int64_t Hv, const bf16* a, const bf16* b,
                       const float* a_log, const float* dt_bias, float* g, float* beta);
void gdn_gates_backward(const Context& ctx, int64_t rows, int64_t Hv, const bf16* a, const bf16* b,
                        const float* a_log, const float* dt_bias, const float* dg, const float* dbeta, bf16* da,
                        bf16* db, float* d_a_log, float* d_dt_bias);

// Attention output gate: y = o ⊙ σ(gate), strided rows of D (gate read in place from q_proj's output).
void sigmoid_gate_forward(const Context& ctx, int64_t rows, int64_t D, const bf16* o, int64_t o_stride,
                          const bf16* gate, int64_t gate_stride, bf16* y);
void sigmoid_gate_backward(const Context& ctx, int64_t rows, int64_t D, const bf16* o, int64_t o_stride,
                           const bf16* gate, int64_t gate_stride, const bf16* dy, bf16* d_o, int64_t d_o_stride,
                           bf16* dgate, int64_t dgate_stride);

// SwiGLU: h = SiLU(g) ⊙ u over rows of I; g and u rows strided by gu_stride (fused gate_up rows).
void swiglu_forward(const Context& ctx, int64_t rows, int64_t I, const bf16* g, const bf16* u, int64_t gu_stride,
                    bf16* h);
void swiglu_backward(const Context& ctx, int64_t rows, int64_t I, const bf16* g, const bf16* u, int64_t gu_stride,
                     const bf16* dh, bf16* dg, bf16* du, int64_t dgu_stride);

// The shared expert's gate: y[r, :] += σ(logit[r]) · s[r, :] (rows of H); backward gives
// dlogit[r] = <dy, s> σ(1−σ) (fp32, overwritten) and ds = σ dy (overwritten).
void scaled_add_forward(const Context& ctx, int64_t rows, int64_t H, const bf16* logit, const bf16* s, bf16* y);
void scaled_add_backward(const Context& ctx, int64_t rows, int64_t H, const bf16* logit, const bf16* s,
                         const bf16* dy, bf16* dlogit, bf16* ds);

}  // namespace mlpt::ref::cuda
