#include "backends/cuda/optimizer.hpp"

#include <cmath>

#include "backends/cuda/kernels.cuh"

namespace mlpt::ref::cuda {

using namespace detail;

namespace {

__global__ void loss_kernel(int64_t n, const float* pw, const float* lt, const float* lp, bool clip, float lo,
                            float hi, float* loss, float* coef) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const float w = pw[i];
    if (w == 0.f) {
      loss[i] = 0.f, coef[i] = 0.f;
      continue;
    }
    const float r = expf(lt[i] - lp[i]);
    if (!clip) {
      loss[i] = -w * r, coef[i] = -w * r;
      continue;
    }
    const float rc = fminf(fmaxf(r, 1.f - lo), 1.f + hi);
    const float unclipped = w * r, clipped = w * rc;  // −min(r·A, clip(r)·A) per unit |weight|
    if (unclipped <= clipped) loss[i] = -unclipped, coef[i] = -w * r;
    else loss[i] = -clipped, coef[i] = 0.f;
  }
}

__global__ void sum_squares_kernel(int64_t n, const float* g, double* out) {
  __shared__ float scratch[32];
  float s = 0.f;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    s += g[i] * g[i];
  s = block_sum(s, scratch);
  if (threadIdx.x == 0) atomicAdd(out, static_cast<double>(s));
}

__global__ void adamw_kernel(int64_t n, float lr, float b1, float b2, float eps, float wd, float c1, float c2,
                             float scale, const float* grad, float* p, float* m, float* v, bf16* working) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const float gr = grad[i] * scale;
    const float mi = b1 * m[i] + (1.f - b1) * gr, vi = b2 * v[i] + (1.f - b2) * gr * gr;
    m[i] = mi, v[i] = vi;
    const float pi = p[i] - lr * ((mi / c1) / (sqrtf(vi / c2) + eps) + wd * p[i]);
    p[i] = pi;
    if (working) working[i] = to_bf(pi);
  }
}

}  // namespace

void grpo_token_loss(const Context& ctx, int64_t n, const float* pw, const float* logp_theta, const float* logp_prev,
                     bool ppo_clip, double clip_low, double clip_high, float* loss, float* coef) {
  if (n <= 0) return;
  loss_kernel<<<blocks_for(n), kThreads, 0, ctx.stream>>>(n, pw, logp_theta, logp_prev, ppo_clip, float(clip_low),
                                                          float(clip_high), loss, coef);
  check_launch("grpo_token_loss");
}

void sum_squares(const Context& ctx, int64_t n, const float* g, double* sum_sq) {
  if (n <= 0) return;
  const unsigned blocks = blocks_for(n) < 1024 ? blocks_for(n) : 1024;
  sum_squares_kernel<<<blocks, kThreads, 0, ctx.stream>>>(n, g, sum_sq);
  check_launch("sum_squares");
}

void adamw_update(const Context& ctx, int64_t n, const AdamWStep& s, const float* grad, float* master, float* m,
                  float* v, bf16* working) {
  if (n <= 0) return;
  const double c1 = 1.0 - std::pow(s.beta1, static_cast<double>(s.step));
  const double c2 = 1.0 - std::pow(s.beta2, static_cast<double>(s.step));
  adamw_kernel<<<blocks_for(n), kThreads, 0, ctx.stream>>>(n, float(s.lr), float(s.beta1), float(s.beta2),
                                                           float(s.eps), float(s.weight_decay), float(c1), float(c2),
                                                           float(s.grad_scale), grad, master, m, v, working);
  check_launch("adamw_update");
}

}  // namespace mlpt::ref::cuda
