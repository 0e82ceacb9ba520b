#include "backends/cuda/embedding.hpp"

#include "backends/cuda/kernels.cuh"

namespace mlpt::ref::cuda {

namespace {
// An id < 0 (outside a vocabulary-parallel rank's range): a zero row, no gradient.
__global__ void gather_kernel(int64_t n, int64_t H, const int32_t* ids, const bf16* E, bf16* x) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n * H; i += int64_t(gridDim.x) * blockDim.x)
    x[i] = ids[i / H] >= 0 ? E[int64_t(ids[i / H]) * H + i % H] : detail::to_bf(0.f);
}
__global__ void scatter_kernel(int64_t n, int64_t H, const int32_t* ids, const bf16* dx, float* dE) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n * H; i += int64_t(gridDim.x) * blockDim.x)
    if (ids[i / H] >= 0) atomicAdd(dE + int64_t(ids[i / H]) * H + i % H, detail::f32(dx[i]));
}
}  // namespace

void embedding_forward(const Context& ctx, int64_t tokens, int64_t H, const int32_t* ids, const bf16* E, bf16* x) {
  if (tokens * H <= 0) return;
  gather_kernel<<<detail::blocks_for(tokens * H), detail::kThreads, 0, ctx.stream>>>(tokens, H, ids, E, x);
  check_launch("embedding_forward");
}

void embedding_backward(const Context& ctx, int64_t tokens, int64_t H, const int32_t* ids, const bf16* dx, float* dE) {
  if (tokens * H <= 0) return;
  scatter_kernel<<<detail::blocks_for(tokens * H), detail::kThreads, 0, ctx.stream>>>(tokens, H, ids, dx, dE);
  check_launch("embedding_backward");
}

}  // namespace mlpt::ref::cuda
