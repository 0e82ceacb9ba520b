// Device helpers shared by the .cu files of backends/cuda: launch sizes, fp32 activations and
// block reductions. Internal to backends/cuda.
#pragma once

#include <cstdint>

#include <cuda_bf16.h>

#include "backends/cuda/context.hpp"

namespace mlpt::ref::cuda::detail {

constexpr int kThreads = 256;

inline unsigned blocks_for(int64_t n, int threads = kThreads) {
  int64_t b = (n + threads - 1) / threads;
  return static_cast<unsigned>(b < 1 ? 1 : (b > 65535LL * 32 ? 65535LL * 32 : b));
}

__device__ __forceinline__ float f32(bf16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float f32(float x) { return x; }
__device__ __forceinline__ bf16 to_bf(float x) { return __float2bfloat16(x); }

__device__ __forceinline__ float sigmoidf_(float x) {
  return x >= 0.f ? 1.f / (1.f + __expf(-x)) : __expf(x) / (1.f + __expf(x));
}
__device__ __forceinline__ float siluf_(float x) { return x * sigmoidf_(x); }
__device__ __forceinline__ float silu_gradf_(float x) {
  float s = sigmoidf_(x);
  return s * (1.f + x * (1.f - s));
}
__device__ __forceinline__ float softplusf_(float x) { return x > 20.f ? x : log1pf(__expf(x)); }

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets the result.
// `scratch` holds 32 floats; the call synchronises the block (twice) so scratch can be reused.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  v = warp_sum(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float r = lane < warps ? scratch[lane] : 0.f;
  return warp_sum(r);
}
__device__ __forceinline__ float block_max(float v, float* scratch) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  v = warp_max(v);
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float r = lane < warps ? scratch[lane] : -INFINITY;
  return warp_max(r);
}

// The packed sequence holding token t: the s with offsets[s] <= t < offsets[s+1] (offsets on device).
__device__ __forceinline__ int64_t sequence_of(const int64_t* offsets, int64_t num_seqs, int64_t t) {
  int64_t lo = 0, hi = num_seqs - 1;
  while (lo < hi) {
    int64_t mid = (lo + hi + 1) / 2;
    if (offsets[mid] <= t) lo = mid; else hi = mid - 1;
  }
  return lo;
}

}  // namespace mlpt::ref::cuda::detail
