// Elementwise conversions and sums declared in context.hpp, and the conversions that mark what
// they changed.
#include "backends/cuda/kernels.cuh"

namespace mlpt::ref::cuda {

namespace {
__global__ void to_bf16_kernel(int64_t n, const float* x, bf16* y) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    y[i] = __float2bfloat16(x[i]);
}
__global__ void to_float_kernel(int64_t n, const bf16* x, float* y) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    y[i] = __bfloat162float(x[i]);
}
template <class T>
__global__ void add_kernel(int64_t n, const T* x, T* y) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    y[i] = T(detail::f32(y[i]) + detail::f32(x[i]));
}
// Old and new bits of element i as an integer of the element's width.
__device__ __forceinline__ unsigned short bits_of(bf16 v) {
  return __bfloat16_as_ushort(v);
}
__device__ __forceinline__ unsigned bits_of(float v) {
  return __float_as_uint(v);
}
__device__ __forceinline__ bf16 convert(float x, bf16*) {
  return __float2bfloat16(x);
}
__device__ __forceinline__ float convert(float x, float*) {
  return x;
}
// Each warp takes 32 consecutive elements at a time (word w of `changed` is elements 32w..32w+31),
// so one ballot is one word and its lane 0 the only writer: no atomics. Every lane of a warp runs
// the same iterations (the bound is on the warp's first element), as __ballot_sync needs.
template <class T>
__global__ void assign_marking_kernel(int64_t n, const float* x, T* y, uint32_t* changed) {
  const unsigned lane = threadIdx.x % 32;
  const int64_t warp = (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) / 32;
  const int64_t warps = int64_t(gridDim.x) * blockDim.x / 32;
  for (int64_t w = warp; w * 32 < n; w += warps) {
    const int64_t i = w * 32 + lane;
    bool differs = false;
    if (i < n) {
      const T v = convert(x[i], y);
      differs = bits_of(v) != bits_of(y[i]);
      y[i] = v;
    }
    const unsigned word = __ballot_sync(0xffffffffu, differs);
    if (lane == 0 && word) changed[w] |= word;
  }
}
}  // namespace

void to_bf16_marking(const Context& ctx, int64_t n, const float* x, bf16* y, uint32_t* changed) {
  if (n <= 0) return;
  assign_marking_kernel<<<detail::blocks_for(n), detail::kThreads, 0, ctx.stream>>>(n, x, y, changed);
  check_launch("to_bf16_marking");
}
void copy_marking(const Context& ctx, int64_t n, const float* x, float* y, uint32_t* changed) {
  if (n <= 0) return;
  assign_marking_kernel<<<detail::blocks_for(n), detail::kThreads, 0, ctx.stream>>>(n, x, y, changed);
  check_launch("copy_marking");
}

void to_bf16(const Context& ctx, int64_t n, const float* x, bf16* y) {
  if (n <= 0) return;
  to_bf16_kernel<<<detail::blocks_for(n), detail::kThreads, 0, ctx.stream>>>(n, x, y);
  check_launch("to_bf16");
}
void to_float(const Context& ctx, int64_t n, const bf16* x, float* y) {
  if (n <= 0) return;
  to_float_kernel<<<detail::blocks_for(n), detail::kThreads, 0, ctx.stream>>>(n, x, y);
  check_launch("to_float");
}
void add_inplace(const Context& ctx, int64_t n, const bf16* x, bf16* y) {
  if (n <= 0) return;
  add_kernel<<<detail::blocks_for(n), detail::kThreads, 0, ctx.stream>>>(n, x, y);
  check_launch("add_inplace(bf16)");
}
void add_inplace(const Context& ctx, int64_t n, const float* x, float* y) {
  if (n <= 0) return;
  add_kernel<<<detail::blocks_for(n), detail::kThreads, 0, ctx.stream>>>(n, x, y);
  check_launch("add_inplace(float)");
}

}  // namespace mlpt::ref::cuda
