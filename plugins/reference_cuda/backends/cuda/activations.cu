#include "backends/cuda/activations.hpp"

#include "backends/cuda/kernels.cuh"

namespace mlpt::ref::cuda {

using namespace detail;

namespace {

#define MLPT_GRID_LOOP(i, n) \
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < (n); i += int64_t(gridDim.x) * blockDim.x)

__global__ void gates_forward_kernel(int64_t rows, int64_t Hv, const bf16* a, const bf16* b, const float* a_log,
                                     const float* dt_bias, float* g, float* beta) {
  MLPT_GRID_LOOP(i, rows * Hv) {
    const int64_t h = i % Hv;
    beta[i] = sigmoidf_(f32(b[i]));
    g[i] = -expf(a_log[h]) * softplusf_(f32(a[i]) + dt_bias[h]);
  }
}

// One block per value head: the per-element gradients, and the head's parameter gradients summed
// over rows in a fixed order (deterministic, no atomics).
__global__ void gates_backward_kernel(int64_t rows, int64_t Hv, const bf16* a, const bf16* b, const float* a_log,
                                      const float* dt_bias, const float* dg, const float* dbeta, bf16* da, bf16* db,
                                      float* d_a_log, float* d_dt_bias) {
  __shared__ float scratch[32];
  const int64_t h = blockIdx.x;
  const float A = expf(a_log[h]);
  float sum_ds = 0.f, sum_dalog = 0.f;
  for (int64_t r = threadIdx.x; r < rows; r += blockDim.x) {
    const int64_t i = r * Hv + h;
    const float be = sigmoidf_(f32(b[i]));
    db[i] = to_bf(dbeta[i] * be * (1.f - be));
    const float s = f32(a[i]) + dt_bias[h];
    const float dsp = s > 20.f ? 1.f : sigmoidf_(s);
    const float ds = dg[i] * (-A) * dsp;
    da[i] = to_bf(ds);
    sum_ds += ds;
    sum_dalog += dg[i] * (-A * softplusf_(s));
  }
  sum_ds = block_sum(sum_ds, scratch);
  sum_dalog = block_sum(sum_dalog, scratch);
  if (threadIdx.x == 0) {
    if (d_dt_bias) d_dt_bias[h] += sum_ds;
    if (d_a_log) d_a_log[h] += sum_dalog;
  }
}

__global__ void sigmoid_gate_forward_kernel(int64_t rows, int64_t D, const bf16* o, int64_t os, const bf16* gate,
                                            int64_t gs, bf16* y) {
  MLPT_GRID_LOOP(i, rows * D) {
    const int64_t r = i / D, c = i % D;
    y[i] = to_bf(f32(o[r * os + c]) * sigmoidf_(f32(gate[r * gs + c])));
  }
}

__global__ void sigmoid_gate_backward_kernel(int64_t rows, int64_t D, const bf16* o, int64_t os, const bf16* gate,
                                             int64_t gs, const bf16* dy, bf16* d_o, int64_t dos, bf16* dgate,
                                             int64_t dgs) {
  MLPT_GRID_LOOP(i, rows * D) {
    const int64_t r = i / D, c = i % D;
    const float s = sigmoidf_(f32(gate[r * gs + c])), d = f32(dy[i]);
    dgate[r * dgs + c] = to_bf(d * f32(o[r * os + c]) * s * (1.f - s));
    d_o[r * dos + c] = to_bf(d * s);
  }
}

__global__ void swiglu_forward_kernel(int64_t rows, int64_t I, const bf16* g, const bf16* u, int64_t st, bf16* h) {
  MLPT_GRID_LOOP(i, rows * I) {
    const int64_t r = i / I, c = i % I;
    h[i] = to_bf(siluf_(f32(g[r * st + c])) * f32(u[r * st + c]));
  }
}

__global__ void swiglu_backward_kernel(int64_t rows, int64_t I, const bf16* g, const bf16* u, int64_t st,
                                       const bf16* dh, bf16* dg, bf16* du, int64_t dst) {
  MLPT_GRID_LOOP(i, rows * I) {
    const int64_t r = i / I, c = i % I;
    const float gv = f32(g[r * st + c]), uv = f32(u[r * st + c]), d = f32(dh[i]);
    dg[r * dst + c] = to_bf(d * uv * silu_gradf_(gv));
    du[r * dst + c] = to_bf(d * siluf_(gv));
  }
}

__global__ void scaled_add_forward_kernel(int64_t rows, int64_t H, const bf16* logit, const bf16* s, bf16* y) {
  MLPT_GRID_LOOP(i, rows * H) {
    const float sg = sigmoidf_(f32(logit[i / H]));
    y[i] = to_bf(f32(y[i]) + sg * f32(s[i]));
  }
}

// One block per row: the dot product for the gate, then the scaled gradient.
__global__ void scaled_add_backward_kernel(int64_t H, const bf16* logit, const bf16* s, const bf16* dy, bf16* dlogit,
                                           bf16* ds) {
  __shared__ float scratch[32];
  const int64_t r = blockIdx.x;
  const float sg = sigmoidf_(f32(logit[r]));
  float dot = 0.f;
  for (int64_t c = threadIdx.x; c < H; c += blockDim.x) {
    const float d = f32(dy[r * H + c]);
    dot += d * f32(s[r * H + c]);
    ds[r * H + c] = to_bf(sg * d);
  }
  dot = block_sum(dot, scratch);
  if (threadIdx.x == 0) dlogit[r] = to_bf(dot * sg * (1.f - sg));
}

#undef MLPT_GRID_LOOP

}  // namespace

void gdn_gates_forward(const Context& ctx, int64_t rows, int64_t Hv, const bf16* a, const bf16* b,
                       const float* a_log, const float* dt_bias, float* g, float* beta) {
  if (rows * Hv <= 0) return;
  gates_forward_kernel<<<blocks_for(rows * Hv), kThreads, 0, ctx.stream>>>(rows, Hv, a, b, a_log, dt_bias, g, beta);
  check_launch("gdn_gates_forward");
}

void gdn_gates_backward(const Context& ctx, int64_t rows, int64_t Hv, const bf16* a, const bf16* b,
                        const float* a_log, const float* dt_bias, const float* dg, const float* dbeta, bf16* da,
                        bf16* db, float* d_a_log, float* d_dt_bias) {
  if (rows <= 0 || Hv <= 0) return;
  gates_backward_kernel<<<static_cast<unsigned>(Hv), kThreads, 0, ctx.stream>>>(rows, Hv, a, b, a_log, dt_bias, dg,
                                                                                dbeta, da, db, d_a_log, d_dt_bias);
  check_launch("gdn_gates_backward");
}

void sigmoid_gate_forward(const Context& ctx, int64_t rows, int64_t D, const bf16* o, int64_t o_stride,
                          const bf16* gate, int64_t gate_stride, bf16* y) {
  if (rows * D <= 0) return;
  sigmoid_gate_forward_kernel<<<blocks_for(rows * D), kThreads, 0, ctx.stream>>>(rows, D, o, o_stride, gate,
                                                                                 gate_stride, y);
  check_launch("sigmoid_gate_forward");
}

void sigmoid_gate_backward(const Context& ctx, int64_t rows, int64_t D, const bf16* o, int64_t o_stride,
                           const bf16* gate, int64_t gate_stride, const bf16* dy, bf16* d_o, int64_t d_o_stride,
                           bf16* dgate, int64_t dgate_stride) {
  if (rows * D <= 0) return;
  sigmoid_gate_backward_kernel<<<blocks_for(rows * D), kThreads, 0, ctx.stream>>>(
      rows, D, o, o_stride, gate, gate_stride, dy, d_o, d_o_stride, dgate, dgate_stride);
  check_launch("sigmoid_gate_backward");
}

void swiglu_forward(const Context& ctx, int64_t rows, int64_t I, const bf16* g, const bf16* u, int64_t gu_stride,
                    bf16* h) {
  if (rows * I <= 0) return;
  swiglu_forward_kernel<<<blocks_for(rows * I), kThreads, 0, ctx.stream>>>(rows, I, g, u, gu_stride, h);
  check_launch("swiglu_forward");
}

void swiglu_backward(const Context& ctx, int64_t rows, int64_t I, const bf16* g, const bf16* u, int64_t gu_stride,
                     const bf16* dh, bf16* dg, bf16* du, int64_t dgu_stride) {
  if (rows * I <= 0) return;
  swiglu_backward_kernel<<<blocks_for(rows * I), kThreads, 0, ctx.stream>>>(rows, I, g, u, gu_stride, dh, dg, du,
                                                                            dgu_stride);
  check_launch("swiglu_backward");
}

void scaled_add_forward(const Context& ctx, int64_t rows, int64_t H, const bf16* logit, const bf16* s, bf16* y) {
  if (rows * H <= 0) return;
  scaled_add_forward_kernel<<<blocks_for(rows * H), kThreads, 0, ctx.stream>>>(rows, H, logit, s, y);
  check_launch("scaled_add_forward");
}

void scaled_add_backward(const Context& ctx, int64_t rows, int64_t H, const bf16* logit, const bf16* s,
                         const bf16* dy, bf16* dlogit, bf16* ds) {
  if (rows <= 0 || H <= 0) return;
  scaled_add_backward_kernel<<<static_cast<unsigned>(rows), kThreads, 0, ctx.stream>>>(H, logit, s, dy, dlogit, ds);
  check_launch("scaled_add_backward");
}

}  // namespace mlpt::ref::cuda
