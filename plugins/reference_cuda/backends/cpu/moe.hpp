// Sparse MoE pieces (docs/qwen35-architecture.md §2.6, router backward §3): routing (softmax over all
// experts, top-k, renormalisation, or replay of recorded experts for R3) and the routed SwiGLU
// experts from the fused gate_up_proj [E, 2I, H] and down_proj [E, H, I]. The router's and the
// shared expert's linears go through linear.hpp. CPU reference backend; T is float or double.
#pragma once

#include "ops/shapes.hpp"

#include <cstdint>

namespace mlpt::ref::cpu {

using MoeShape = ::mlpt::ref::MoeShape;  // ops/shapes.hpp

// logits [rows, E] -> experts [rows, k] (int16) and weights [rows, k]. With `replay` ([rows, k])
// the experts are taken from it (R3) and only the weights are computed from the logits:
// w_i = exp(l_i) / Σ_{j∈K} exp(l_j) (norm_topk_prob) or the full softmax p_i. Without replay,
// top-k by logit, ties to the lower index. Replayed ids out of range are an error (returns false).
template <class T>
bool route(const MoeShape& shape, int64_t rows, const T* logits, const int16_t* replay, int16_t* experts,
           T* weights);

// d(router logits) [rows, E] (overwritten) from d(weights) [rows, k].
template <class T>
void route_backward(const MoeShape& shape, int64_t rows, const T* logits, const int16_t* experts, const T* weights,
                    const T* dweights, T* dlogits);

// y[rows, H] += Σ_i w_i · E_i(x).
template <class T>
void experts_forward(const MoeShape& shape, int64_t rows, const T* x, const int16_t* experts, const T* weights,
                     const T* gate_up, const T* down, T* y);

// Given dy [rows, H]: dx (+)= ..., dweights [rows, k] (overwritten) = <dy, E_i(x)>, and the expert
// weight gradients accumulate into dgate_up / ddown (NULL skips them). Recomputes the expert
// activations instead of storing them.
template <class T>
void experts_backward(const MoeShape& shape, int64_t rows, const T* x, const int16_t* experts, const T* weights,
                      const T* gate_up, const T* down, const T* dy, T* dx, T* dweights, T* dgate_up, T* ddown);

}  // namespace mlpt::ref::cpu
