// Causal depthwise convolution + SiLU over the GDN qkv stream (docs/qwen35-architecture.md §2.4.2), for
// packed variable-length sequences: the window resets at every sequence boundary.
// CPU reference backend; T is float or double.
#pragma once

#include <cstddef>
#include <cstdint>

namespace mlpt::ref::cpu {

// x, y [T, C]; w [C, K] (the checkpoint's [C, 1, K]). Sequence s is rows [offsets[s], offsets[s+1]).
// y[t, c] = SiLU(Σ_j w[c, j] · x[t − K + 1 + j, c]), with inputs before the sequence start read from
// caches[s] ([K − 1, C], oldest first: the last K − 1 raw inputs before the sequence) or zero when
// `caches` or caches[s] is NULL. When `update_caches`, caches[s] becomes the last K − 1 raw inputs
// including this sequence (the decode window).
template <class T>
void causal_conv_silu_forward(int64_t C, int64_t K, const int64_t* offsets, size_t num_seqs, const T* x, const T* w,
                              T* const* caches, bool update_caches, T* y);

// Gradients: dx is overwritten, dw (+)=. Sequence s starts from windows[s] ([K − 1, C], as the
// forward's caches) or from zeros when `windows` or windows[s] is NULL; the gradient of that window
// is written to d_windows[s] when given (a shared prefix's continuation hands it to the prefix).
template <class T>
void causal_conv_silu_backward(int64_t C, int64_t K, const int64_t* offsets, size_t num_seqs, const T* x,
                               const T* w, const T* dy, T* dx, T* dw, const T* const* windows = nullptr,
                               T* const* d_windows = nullptr);

}  // namespace mlpt::ref::cpu
