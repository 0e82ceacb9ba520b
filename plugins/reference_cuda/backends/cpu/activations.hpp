// Pointwise activations and gates (docs/qwen35-architecture.md §2.4.3, §2.5, §2.6; backward §3).
// CPU reference backend; T is float or double. Backward functions overwrite input gradients and
// accumulate (+=) into parameter gradients.
#pragma once

#include <cmath>
#include <cstdint>

namespace mlpt::ref::cpu {

template <class T>
inline T sigmoid(T x) {
  return x >= 0 ? T(1) / (T(1) + std::exp(-x)) : std::exp(x) / (T(1) + std::exp(x));
}
template <class T>
inline T silu(T x) { return x * sigmoid(x); }
template <class T>
inline T silu_grad(T x) {
  T s = sigmoid(x);
  return s * (T(1) + x * (T(1) - s));
}
// softplus with PyTorch's threshold 20 (identity above it).
template <class T>
inline T softplus(T x) { return x > T(20) ? x : std::log1p(std::exp(x)); }

// GDN gates per token and value head: beta = σ(b); g = −exp(A_log) · softplus(a + dt_bias).
// a, b, g, beta are [rows, Hv]; A_log and dt_bias are [Hv].
template <class T>
void gdn_gates_forward(int64_t rows, int64_t Hv, const T* a, const T* b, const T* a_log, const T* dt_bias, T* g,
                       T* beta);
template <class T>
void gdn_gates_backward(int64_t rows, int64_t Hv, const T* a, const T* b, const T* a_log, const T* dt_bias,
                        const T* dg, const T* dbeta, T* da, T* db, T* d_a_log, T* d_dt_bias);

// Attention output gate: y = o ⊙ σ(gate); o and gate are strided rows of D (gate read in place
// from the interleaved q_proj output).
template <class T>
void sigmoid_gate_forward(int64_t rows, int64_t D, const T* o, int64_t o_stride, const T* gate, int64_t gate_stride,
                          T* y);
template <class T>
void sigmoid_gate_backward(int64_t rows, int64_t D, const T* o, int64_t o_stride, const T* gate,
                           int64_t gate_stride, const T* dy, T* d_o, int64_t d_o_stride, T* dgate,
                           int64_t dgate_stride);

// SwiGLU: h = SiLU(g) ⊙ u, rows of I, g and u strided (fused gate_up rows or separate tensors).
template <class T>
void swiglu_forward(int64_t rows, int64_t I, const T* g, const T* u, int64_t gu_stride, T* h);
template <class T>
void swiglu_backward(int64_t rows, int64_t I, const T* g, const T* u, int64_t gu_stride, const T* dh, T* dg, T* du,
                     int64_t dgu_stride);

}  // namespace mlpt::ref::cpu
