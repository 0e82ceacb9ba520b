// Sparse MoE pieces (docs/qwen35-architecture.md §2.6, router backward §3): the CUDA counterpart of
// ../cpu/moe.hpp. The router runs in fp32 on fp32 logits; the routed experts are grouped GEMMs over
// the tokens each expert received (fused gate_up_proj [E, 2I, H], down_proj [E, H, I], bf16).
#pragma once

#include "backends/cpu/moe.hpp"
#include "backends/cuda/context.hpp"

namespace mlpt::ref::cuda {

using MoeShape = cpu::MoeShape;  // the CPU backend's shape (H, E, k, I, norm_topk_prob)

// logits [rows, E] fp32 -> experts [rows, k] int16 and weights [rows, k] fp32: top-k by logit
// (ties to the lower index), or with `replay` the recorded experts (R3), weights from the logits.
// Replayed ids out of range are counted into *bad_replays (device int, may be NULL).
void route(const Context& ctx, const MoeShape& shape, int64_t rows, const float* logits,
           const int16_t* replay, int16_t* experts, float* weights, int* bad_replays);

// d(router logits) [rows, E] fp32 (overwritten) from d(weights) [rows, k] fp32.
void route_backward(const Context& ctx, const MoeShape& shape, int64_t rows, const float* logits,
                    const int16_t* experts, const float* weights, const float* dweights, float* dlogits);

// y[rows, H] += Σ_i w_i · E_i(x). `scratch` grows as needed. In the host-sized forms (the
// context's cuda_experts: grouped, per_expert, or device_sized beyond a small batch) synchronises
// ctx.stream once: the per-expert token counts size the products on the host. The device-sized
// forms do not (linear.hpp's expert_form).
void experts_forward(const Context& ctx, const MoeShape& shape, int64_t rows, const bf16* x,
                     const int16_t* experts, const float* weights, const bf16* gate_up, const bf16* down,
                     bf16* y, DeviceBuffer& scratch);

// Given dy [rows, H]: dx (+)= ..., dweights [rows, k] fp32 (overwritten) = <dy, E_i(x)>, and the
// expert weight gradients (fp32) accumulate into dgate_up / ddown (NULL skips them). Recomputes the
// expert activations.
void experts_backward(const Context& ctx, const MoeShape& shape, int64_t rows, const bf16* x,
                      const int16_t* experts, const float* weights, const bf16* gate_up, const bf16* down,
                      const bf16* dy, bf16* dx, bool accumulate_dx, float* dweights, float* dgate_up,
                      float* ddown, DeviceBuffer& scratch);

}  // namespace mlpt::ref::cuda
