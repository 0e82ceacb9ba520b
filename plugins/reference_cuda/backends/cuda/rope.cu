#include "backends/cuda/rope.hpp"

#include "backends/cuda/kernels.cuh"

namespace mlpt::ref::cuda {

namespace {

// Thread per (row, head, pair i < rotary_dim / 2). The angle is position · theta^(−2i/rd), formed
// in double as the CPU backend does (positions reach 2^18; fp32 angles would lose ~0.03 rad).
__global__ void rope_kernel(int64_t rows, int64_t heads, int64_t D, int64_t rd, double theta, const int64_t* pos,
                            bf16* x, float sign) {
  const int64_t half = rd / 2;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < rows * heads * half;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t p = i % half, rh = i / half, r = rh / heads;
    const double a = static_cast<double>(pos[r]) * pow(theta, -2.0 * static_cast<double>(p) / static_cast<double>(rd));
    const float c = static_cast<float>(cos(a)), s = sign * static_cast<float>(sin(a));
    bf16* v = x + rh * D;
    const float x1 = detail::f32(v[p]), x2 = detail::f32(v[p + half]);
    v[p] = detail::to_bf(x1 * c - x2 * s);
    v[p + half] = detail::to_bf(x2 * c + x1 * s);
  }
}

void rotate(const Context& ctx, int64_t rows, int64_t heads, int64_t D, int64_t rd, double theta, const int64_t* pos,
            bf16* x, float sign, const char* what) {
  const int64_t n = rows * heads * (rd / 2);
  if (n <= 0) return;
  rope_kernel<<<detail::blocks_for(n), detail::kThreads, 0, ctx.stream>>>(rows, heads, D, rd, theta, pos, x, sign);
  check_launch(what);
}

}  // namespace

void rope_forward(const Context& ctx, int64_t rows, int64_t heads, int64_t D, int64_t rotary_dim, double theta,
                  const int64_t* positions, bf16* x) {
  rotate(ctx, rows, heads, D, rotary_dim, theta, positions, x, 1.f, "rope_forward");
}

void rope_backward(const Context& ctx, int64_t rows, int64_t heads, int64_t D, int64_t rotary_dim, double theta,
                   const int64_t* positions, bf16* dx) {
  rotate(ctx, rows, heads, D, rotary_dim, theta, positions, dx, -1.f, "rope_backward");
}

}  // namespace mlpt::ref::cuda
