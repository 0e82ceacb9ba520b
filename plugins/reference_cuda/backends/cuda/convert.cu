// Elementwise conversions and sums declared in context.hpp.
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
}  // namespace

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
