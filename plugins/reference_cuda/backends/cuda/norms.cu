// One block per row (D up to tens of thousands: threads stride over the row); weight gradients
// are summed per block into fp32 with atomics (order-dependent in the last bits only).
#include "backends/cuda/norms.hpp"

#include "backends/cuda/kernels.cuh"

namespace mlpt::ref::cuda {

using namespace detail;

namespace {

constexpr int kNormThreads = 128;

__global__ void rmsnorm_forward_kernel(int64_t D, const bf16* x, const float* w, float eps, bf16* y) {
  __shared__ float scratch[32];
  const bf16* xr = x + blockIdx.x * D;
  float ss = 0.f;
  for (int64_t i = threadIdx.x; i < D; i += blockDim.x) ss += f32(xr[i]) * f32(xr[i]);
  const float rstd = rsqrtf(block_sum(ss, scratch) / float(D) + eps);
  for (int64_t i = threadIdx.x; i < D; i += blockDim.x) y[blockIdx.x * D + i] = to_bf(f32(xr[i]) * rstd * (1.f + w[i]));
}

__global__ void rmsnorm_backward_kernel(int64_t D, const bf16* x, const float* w, float eps, const bf16* dy, bf16* dx,
                                        float* dw) {
  __shared__ float scratch[32];
  const bf16* xr = x + blockIdx.x * D;
  const bf16* dyr = dy + blockIdx.x * D;
  float ss = 0.f;
  for (int64_t i = threadIdx.x; i < D; i += blockDim.x) ss += f32(xr[i]) * f32(xr[i]);
  const float rstd = rsqrtf(block_sum(ss, scratch) / float(D) + eps);
  float dot = 0.f;
  for (int64_t i = threadIdx.x; i < D; i += blockDim.x) {
    const float n = f32(xr[i]) * rstd, d = f32(dyr[i]);
    if (dw) atomicAdd(dw + i, d * n);
    dot += n * d * (1.f + w[i]);
  }
  dot = block_sum(dot, scratch);
  for (int64_t i = threadIdx.x; i < D; i += blockDim.x) {
    const float n = f32(xr[i]) * rstd;
    dx[blockIdx.x * D + i] = to_bf(rstd * (f32(dyr[i]) * (1.f + w[i]) - n * dot / float(D)));
  }
}

__global__ void gated_forward_kernel(int64_t D, const bf16* o, const bf16* z, const float* w, float eps, bf16* y) {
  __shared__ float scratch[32];
  const int64_t base = blockIdx.x * D;
  float ss = 0.f;
  for (int64_t i = threadIdx.x; i < D; i += blockDim.x) ss += f32(o[base + i]) * f32(o[base + i]);
  const float rstd = rsqrtf(block_sum(ss, scratch) / float(D) + eps);
  for (int64_t i = threadIdx.x; i < D; i += blockDim.x)
    y[base + i] = to_bf(w[i] * f32(o[base + i]) * rstd * siluf_(f32(z[base + i])));
}

__global__ void gated_backward_kernel(int64_t D, const bf16* o, const bf16* z, const float* w, float eps,
                                      const bf16* dy, bf16* d_o, bf16* dz, float* dw) {
  __shared__ float scratch[32];
  const int64_t base = blockIdx.x * D;
  float ss = 0.f;
  for (int64_t i = threadIdx.x; i < D; i += blockDim.x) ss += f32(o[base + i]) * f32(o[base + i]);
  const float rstd = rsqrtf(block_sum(ss, scratch) / float(D) + eps);
  float dot = 0.f;
  for (int64_t i = threadIdx.x; i < D; i += blockDim.x) {
    const float n = f32(o[base + i]) * rstd, zv = f32(z[base + i]), s = siluf_(zv), d = f32(dy[base + i]);
    dz[base + i] = to_bf(d * w[i] * n * silu_gradf_(zv));
    if (dw) atomicAdd(dw + i, d * n * s);
    dot += n * d * w[i] * s;
  }
  dot = block_sum(dot, scratch);
  for (int64_t i = threadIdx.x; i < D; i += blockDim.x) {
    const float n = f32(o[base + i]) * rstd, dn = f32(dy[base + i]) * w[i] * siluf_(f32(z[base + i]));
    d_o[base + i] = to_bf(rstd * (dn - n * dot / float(D)));
  }
}

__global__ void l2_forward_kernel(int64_t heads, int64_t D, const bf16* x, int64_t xs, float eps, float scale,
                                  float* y) {
  __shared__ float scratch[32];
  const bf16* xr = x + (blockIdx.x / heads) * xs + (blockIdx.x % heads) * D;
  float ss = 0.f;
  for (int64_t i = threadIdx.x; i < D; i += blockDim.x) ss += f32(xr[i]) * f32(xr[i]);
  const float f = scale * rsqrtf(block_sum(ss, scratch) + eps);
  for (int64_t i = threadIdx.x; i < D; i += blockDim.x) y[blockIdx.x * D + i] = f32(xr[i]) * f;
}

__global__ void l2_backward_kernel(int64_t heads, int64_t D, const bf16* x, int64_t xs, float eps, float scale,
                                   const float* dy, bf16* dx, int64_t dxs) {
  __shared__ float scratch[32];
  const bf16* xr = x + (blockIdx.x / heads) * xs + (blockIdx.x % heads) * D;
  bf16* dxr = dx + (blockIdx.x / heads) * dxs + (blockIdx.x % heads) * D;
  const float* dyr = dy + blockIdx.x * D;
  float ss = 0.f;
  for (int64_t i = threadIdx.x; i < D; i += blockDim.x) ss += f32(xr[i]) * f32(xr[i]);
  const float rn = rsqrtf(block_sum(ss, scratch) + eps);
  float dot = 0.f;
  for (int64_t i = threadIdx.x; i < D; i += blockDim.x) dot += f32(xr[i]) * rn * dyr[i];
  dot = block_sum(dot, scratch);
  for (int64_t i = threadIdx.x; i < D; i += blockDim.x)
    dxr[i] = to_bf(scale * rn * (dyr[i] - f32(xr[i]) * rn * dot));
}

unsigned rows_grid(int64_t rows) { return static_cast<unsigned>(rows); }

}  // namespace

void rmsnorm_forward(const Context& ctx, int64_t rows, int64_t D, const bf16* x, const float* w, double eps, bf16* y) {
  if (rows <= 0 || D <= 0) return;
  rmsnorm_forward_kernel<<<rows_grid(rows), kNormThreads, 0, ctx.stream>>>(D, x, w, float(eps), y);
  check_launch("rmsnorm_forward");
}

void rmsnorm_backward(const Context& ctx, int64_t rows, int64_t D, const bf16* x, const float* w, double eps,
                      const bf16* dy, bf16* dx, float* dw) {
  if (rows <= 0 || D <= 0) return;
  rmsnorm_backward_kernel<<<rows_grid(rows), kNormThreads, 0, ctx.stream>>>(D, x, w, float(eps), dy, dx, dw);
  check_launch("rmsnorm_backward");
}

void gated_rmsnorm_forward(const Context& ctx, int64_t rows, int64_t D, const bf16* o, const bf16* z, const float* w,
                           double eps, bf16* y) {
  if (rows <= 0 || D <= 0) return;
  gated_forward_kernel<<<rows_grid(rows), kNormThreads, 0, ctx.stream>>>(D, o, z, w, float(eps), y);
  check_launch("gated_rmsnorm_forward");
}

void gated_rmsnorm_backward(const Context& ctx, int64_t rows, int64_t D, const bf16* o, const bf16* z,
                            const float* w, double eps, const bf16* dy, bf16* d_o, bf16* dz, float* dw) {
  if (rows <= 0 || D <= 0) return;
  gated_backward_kernel<<<rows_grid(rows), kNormThreads, 0, ctx.stream>>>(D, o, z, w, float(eps), dy, d_o, dz, dw);
  check_launch("gated_rmsnorm_backward");
}

void l2norm_forward(const Context& ctx, int64_t rows, int64_t heads, int64_t D, const bf16* x, int64_t x_stride,
                    double eps, double scale, float* y) {
  if (rows <= 0 || D <= 0 || heads <= 0) return;
  l2_forward_kernel<<<rows_grid(rows), kNormThreads, 0, ctx.stream>>>(heads, D, x, x_stride, float(eps), float(scale),
                                                                       y);
  check_launch("l2norm_forward");
}

void l2norm_backward(const Context& ctx, int64_t rows, int64_t heads, int64_t D, const bf16* x, int64_t x_stride,
                     double eps, double scale, const float* dy, bf16* dx, int64_t dx_stride) {
  if (rows <= 0 || D <= 0 || heads <= 0) return;
  l2_backward_kernel<<<rows_grid(rows), kNormThreads, 0, ctx.stream>>>(heads, D, x, x_stride, float(eps),
                                                                        float(scale), dy, dx, dx_stride);
  check_launch("l2norm_backward");
}

}  // namespace mlpt::ref::cuda
