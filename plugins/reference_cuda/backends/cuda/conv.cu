// Thread per (token, channel); K is small (4), so the backward recomputes pre-activations.
#include "backends/cuda/conv.hpp"

#include "backends/cuda/kernels.cuh"

namespace mlpt::ref::cuda {

using namespace detail;

namespace {

// The raw input at position tau (relative to the sequence start) of channel c: x, the cache, or 0.
__device__ __forceinline__ float conv_input(const bf16* x, const bf16* cache, int64_t start, int64_t tau, int64_t W,
                                            int64_t C, int64_t c) {
  if (tau >= 0) return f32(x[(start + tau) * C + c]);
  if (cache && W + tau >= 0) return f32(cache[(W + tau) * C + c]);
  return 0.f;
}

__global__ void conv_forward_kernel(int64_t C, int64_t K, const int64_t* offsets, int64_t num_seqs, int64_t T,
                                    const bf16* x, const float* w, bf16* const* caches, bf16* y) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < T * C; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t t = i / C, c = i % C;
    const int64_t s = sequence_of(offsets, num_seqs, t), start = offsets[s];
    const bf16* cache = caches ? caches[s] : nullptr;
    const int64_t W = K - 1, rel = t - start;
    float acc = 0.f;
    for (int64_t j = 0; j < K; ++j) acc += w[c * K + j] * conv_input(x, cache, start, rel - W + j, W, C, c);
    y[i] = to_bf(siluf_(acc));
  }
}

// Thread per (sequence, channel), window slots in increasing order: slot j reads old slot n + j
// (> j) before that slot is rewritten, so the update is safe in place.
__global__ void conv_update_kernel(int64_t C, int64_t K, const int64_t* offsets, int64_t num_seqs, const bf16* x,
                                   bf16* const* caches) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < num_seqs * C;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t s = i / C, c = i % C;
    bf16* cache = caches[s];
    if (!cache) continue;
    const int64_t start = offsets[s], n = offsets[s + 1] - start, W = K - 1;
    for (int64_t j = 0; j < W; ++j) {
      const int64_t src = n + j;  // index in [old window ; x_seq]
      cache[j * C + c] = src < W ? cache[src * C + c] : x[(start + src - W) * C + c];
    }
  }
}

__device__ __forceinline__ float pre_activation(const bf16* x, const float* w, int64_t start, int64_t rel, int64_t K,
                                                int64_t C, int64_t c) {
  float pre = 0.f;
  for (int64_t j = 0; j < K; ++j) {
    const int64_t tau = rel - (K - 1) + j;
    if (tau >= 0) pre += w[c * K + j] * f32(x[(start + tau) * C + c]);
  }
  return pre;
}

__global__ void conv_backward_input_kernel(int64_t C, int64_t K, const int64_t* offsets, int64_t num_seqs, int64_t T,
                                           const bf16* x, const float* w, const bf16* dy, bf16* dx) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < T * C; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t tau = i / C, c = i % C;
    const int64_t s = sequence_of(offsets, num_seqs, tau), start = offsets[s], end = offsets[s + 1];
    float acc = 0.f;
    for (int64_t j = 0; j < K; ++j) {
      const int64_t t = tau + (K - 1) - j;  // output that read tau through tap j
      if (t >= end) continue;
      const float pre = pre_activation(x, w, start, t - start, K, C, c);
      acc += w[c * K + j] * f32(dy[t * C + c]) * silu_gradf_(pre);
    }
    dx[i] = to_bf(acc);
  }
}

// Block (channel tile of blockDim.x, token tile of kTokens): partial dw per tap, one atomic each.
constexpr int64_t kTokens = 256;
constexpr int kMaxK = 8;
__global__ void conv_backward_weight_kernel(int64_t C, int64_t K, const int64_t* offsets, int64_t num_seqs, int64_t T,
                                            const bf16* x, const float* w, const bf16* dy, float* dw) {
  const int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (c >= C) return;
  float acc[kMaxK] = {};
  const int64_t t0 = blockIdx.y * kTokens, t1 = t0 + kTokens < T ? t0 + kTokens : T;
  for (int64_t t = t0; t < t1; ++t) {
    const int64_t s = sequence_of(offsets, num_seqs, t), start = offsets[s];
    const float dpre = f32(dy[t * C + c]) * silu_gradf_(pre_activation(x, w, start, t - start, K, C, c));
    for (int64_t j = 0; j < K; ++j) {
      const int64_t tau = t - start - (K - 1) + j;
      if (tau >= 0) acc[j] += dpre * f32(x[(start + tau) * C + c]);
    }
  }
  for (int64_t j = 0; j < K; ++j) atomicAdd(dw + c * K + j, acc[j]);
}

}  // namespace

void causal_conv_silu_forward(const Context& ctx, int64_t C, int64_t K, const int64_t* offsets, int64_t num_seqs,
                              int64_t num_tokens, const bf16* x, const float* w, bf16* const* caches,
                              bool update_caches, bf16* y) {
  if (num_seqs <= 0 || C <= 0) return;
  if (num_tokens > 0) {
    conv_forward_kernel<<<blocks_for(num_tokens * C), kThreads, 0, ctx.stream>>>(C, K, offsets, num_seqs, num_tokens,
                                                                                 x, w, caches, y);
    check_launch("causal_conv_silu_forward");
  }
  if (update_caches && caches && K > 1) {  // after the forward read the old windows (stream order)
    conv_update_kernel<<<blocks_for(num_seqs * C), kThreads, 0, ctx.stream>>>(C, K, offsets, num_seqs, x, caches);
    check_launch("causal_conv_silu_forward(update caches)");
  }
}

void causal_conv_silu_backward(const Context& ctx, int64_t C, int64_t K, const int64_t* offsets, int64_t num_seqs,
                               int64_t num_tokens, const bf16* x, const float* w, const bf16* dy, bf16* dx,
                               float* dw) {
  if (num_seqs <= 0 || C <= 0 || num_tokens <= 0) return;
  if (K > kMaxK) check(cudaErrorInvalidValue, "causal_conv_silu_backward: kernel size above 8");
  conv_backward_input_kernel<<<blocks_for(num_tokens * C), kThreads, 0, ctx.stream>>>(C, K, offsets, num_seqs,
                                                                                      num_tokens, x, w, dy, dx);
  check_launch("causal_conv_silu_backward(input)");
  if (dw) {
    dim3 grid(static_cast<unsigned>((C + 127) / 128), static_cast<unsigned>((num_tokens + kTokens - 1) / kTokens));
    conv_backward_weight_kernel<<<grid, 128, 0, ctx.stream>>>(C, K, offsets, num_seqs, num_tokens, x, w, dy, dw);
    check_launch("causal_conv_silu_backward(weight)");
  }
}

}  // namespace mlpt::ref::cuda
