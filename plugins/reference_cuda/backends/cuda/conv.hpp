// Causal depthwise convolution + SiLU over the GDN qkv stream (docs/qwen35-architecture.md §2.4.2) for
// packed variable-length sequences (the window resets at every sequence boundary): the CUDA
// counterpart of ../cpu/conv.hpp. Weights fp32.
#pragma once

#include "backends/cuda/context.hpp"

namespace mlpt::ref::cuda {

// x, y [T, C] bf16; w [C, K] fp32; offsets [num_seqs + 1] on the device. Inputs before a sequence's
// start come from caches[s] ([K − 1, C] bf16, oldest first; `caches` is a device array of device
// pointers, NULL entries and a NULL array meaning zeros). With `update_caches`, caches[s] then
// holds the last K − 1 raw inputs including this sequence (the decode window).
void causal_conv_silu_forward(const Context& ctx, int64_t C, int64_t K, const int64_t* offsets, int64_t num_seqs,
                              int64_t num_tokens, const bf16* x, const float* w, bf16* const* caches,
                              bool update_caches, bf16* y);

// Gradients for sequences that start from a zero window (training): dx overwritten, dw += (fp32).
void causal_conv_silu_backward(const Context& ctx, int64_t C, int64_t K, const int64_t* offsets, int64_t num_seqs,
                               int64_t num_tokens, const bf16* x, const float* w, const bf16* dy, bf16* dx, float* dw);

}  // namespace mlpt::ref::cuda
