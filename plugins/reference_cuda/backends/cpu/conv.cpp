#include "backends/cpu/conv.hpp"

#include <algorithm>
#include <vector>

#include "backends/cpu/activations.hpp"

namespace mlpt::ref::cpu {

template <class T>
void causal_conv_silu_forward(int64_t C, int64_t K, const int64_t* offsets, size_t num_seqs, const T* x, const T* w,
                              T* const* caches, bool update_caches, T* y) {
  const int64_t W = K - 1;
  for (size_t s = 0; s < num_seqs; ++s) {
    const int64_t start = offsets[s], n = offsets[s + 1] - offsets[s];
    T* cache = caches ? caches[s] : nullptr;
    for (int64_t t = 0; t < n; ++t) {
      T* yr = y + (start + t) * C;
      for (int64_t c = 0; c < C; ++c) yr[c] = 0;
      for (int64_t j = 0; j < K; ++j) {
        int64_t tau = t - W + j;  // relative to the sequence start
        const T* src = tau >= 0 ? x + (start + tau) * C : cache ? cache + (W + tau) * C : nullptr;
        if (!src) continue;
        for (int64_t c = 0; c < C; ++c) yr[c] += w[c * K + j] * src[c];
      }
      for (int64_t c = 0; c < C; ++c) yr[c] = silu(yr[c]);
    }
    if (update_caches && cache && W > 0) {
      std::vector<T> window(static_cast<size_t>((W + n) * C));
      std::copy(cache, cache + W * C, window.begin());
      std::copy(x + start * C, x + (start + n) * C, window.begin() + W * C);
      std::copy(window.end() - W * C, window.end(), cache);
    }
  }
}

template <class T>
void causal_conv_silu_backward(int64_t C, int64_t K, const int64_t* offsets, size_t num_seqs, const T* x,
                               const T* w, const T* dy, T* dx, T* dw, const T* const* windows, T* const* d_windows) {
  const int64_t W = K - 1;
  std::vector<T> dpre(static_cast<size_t>(C));
  for (size_t s = 0; s < num_seqs; ++s) {
    const int64_t start = offsets[s], n = offsets[s + 1] - offsets[s];
    const T* window = windows ? windows[s] : nullptr;
    T* d_window = d_windows ? d_windows[s] : nullptr;
    if (d_window) std::fill(d_window, d_window + W * C, T(0));
    // Input tau of this sequence (relative to its start; tau < 0 reads the window), and its gradient.
    auto input = [&](int64_t tau) -> const T* {
      return tau >= 0 ? x + (start + tau) * C : window ? window + (W + tau) * C : nullptr;
    };
    auto grad = [&](int64_t tau) -> T* {
      return tau >= 0 ? dx + (start + tau) * C : d_window ? d_window + (W + tau) * C : nullptr;
    };
    for (int64_t t = 0; t < n; ++t)
      for (int64_t c = 0; c < C; ++c) dx[(start + t) * C + c] = 0;
    for (int64_t t = 0; t < n; ++t) {
      for (int64_t c = 0; c < C; ++c) {  // recompute the pre-activation
        T pre = 0;
        for (int64_t j = 0; j < K; ++j)
          if (const T* src = input(t - W + j)) pre += w[c * K + j] * src[c];
        dpre[c] = dy[(start + t) * C + c] * silu_grad(pre);
      }
      for (int64_t j = 0; j < K; ++j) {
        const T* src = input(t - W + j);
        if (!src) continue;
        T* dsrc = grad(t - W + j);
        for (int64_t c = 0; c < C; ++c) {
          if (dsrc) dsrc[c] += w[c * K + j] * dpre[c];
          if (dw) dw[c * K + j] += dpre[c] * src[c];
        }
      }
    }
  }
}

template void causal_conv_silu_forward<float>(int64_t, int64_t, const int64_t*, size_t, const float*, const float*,
                                              float* const*, bool, float*);
template void causal_conv_silu_forward<double>(int64_t, int64_t, const int64_t*, size_t, const double*,
                                               const double*, double* const*, bool, double*);
template void causal_conv_silu_backward<float>(int64_t, int64_t, const int64_t*, size_t, const float*, const float*,
                                               const float*, float*, float*, const float* const*, float* const*);
template void causal_conv_silu_backward<double>(int64_t, int64_t, const int64_t*, size_t, const double*,
                                                const double*, const double*, double*, double*,
                                                const double* const*, double* const*);

}  // namespace mlpt::ref::cpu
