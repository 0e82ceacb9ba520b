// Row reductions over the vocabulary: one block per row. Sampling finds the top-p threshold by
// bisection on the probability (no sort of the vocabulary), then locates the draw with a per-thread
// prefix over contiguous id ranges.
#include "backends/cuda/head.hpp"

#include "backends/cuda/kernels.cuh"
#include "model/counter_uniform.hpp"

namespace mlpt::ref::cuda {

using namespace detail;

namespace {

constexpr int kRowThreads = 256;
constexpr int kSampleThreads = 1024;
constexpr int kBisections = 40;

__global__ void logprob_kernel(int64_t V, int64_t valid, const float* logits, const int32_t* targets, float* logprob,
                               float* lse) {
  __shared__ float scratch[32];
  const float* l = logits + blockIdx.x * V;
  float m = -INFINITY;
  for (int64_t i = threadIdx.x; i < valid; i += blockDim.x) m = fmaxf(m, l[i]);
  m = block_max(m, scratch);
  float z = 0.f;
  for (int64_t i = threadIdx.x; i < valid; i += blockDim.x) z += expf(l[i] - m);
  z = block_sum(z, scratch);
  if (threadIdx.x == 0) {
    const float row_lse = m + logf(z);
    lse[blockIdx.x] = row_lse;
    logprob[blockIdx.x] = l[targets[blockIdx.x]] - row_lse;
  }
}

__global__ void logprob_backward_kernel(int64_t rows, int64_t V, int64_t valid, const float* logits, const float* lse,
                                        const int32_t* targets, const float* coef, bf16* dlogits) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < rows * V; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / V, c = i % V;
    float d = 0.f;
    if (c < valid && coef[r] != 0.f) d = coef[r] * ((c == targets[r] ? 1.f : 0.f) - expf(logits[i] - lse[r]));
    dlogits[i] = to_bf(d);
  }
}

__global__ void sample_kernel(int64_t V, int64_t valid, const float* logits, const SamplingRow* params,
                              int32_t* tokens, float* logprob) {
  __shared__ float scratch[32];
  __shared__ float prefix[kSampleThreads];
  __shared__ int chosen;
  const float* l = logits + blockIdx.x * V;
  const SamplingRow p = params[blockIdx.x];
  const float inv_t = 1.f / p.temperature;
  float m = -INFINITY;
  for (int64_t i = threadIdx.x; i < valid; i += blockDim.x) m = fmaxf(m, l[i] * inv_t);
  m = block_max(m, scratch);
  auto weight = [&](int64_t i) { return __expf(l[i] * inv_t - m); };  // the max id has weight 1
  auto mass_at_least = [&](float tau) {
    float s = 0.f;
    for (int64_t i = threadIdx.x; i < valid; i += blockDim.x) {
      const float w = weight(i);
      if (w >= tau) s += w;
    }
    return block_sum(s, scratch);
  };
  float tau = 0.f;
  if (p.top_p < 1.f) {  // the largest τ whose kept mass still reaches top_p of the total
    const float goal = p.top_p * mass_at_least(0.f);
    float lo = 0.f, hi = 1.f;
    for (int it = 0; it < kBisections; ++it) {
      const float mid = 0.5f * (lo + hi);
      if (mass_at_least(mid) >= goal) lo = mid; else hi = mid;
    }
    tau = lo;
  }
  const int64_t chunk = (valid + blockDim.x - 1) / blockDim.x;
  const int64_t c0 = threadIdx.x * chunk, c1 = c0 + chunk < valid ? c0 + chunk : valid;
  float part = 0.f;
  for (int64_t i = c0; i < c1; ++i) {
    const float w = weight(i);
    if (w >= tau) part += w;
  }
  prefix[threadIdx.x] = part;
  if (threadIdx.x == 0) chosen = -1;
  __syncthreads();
  if (threadIdx.x == 0) {  // exclusive scan; scratch[0] keeps the kept mass
    float acc = 0.f;
    for (unsigned t = 0; t < blockDim.x; ++t) {
      const float v = prefix[t];
      prefix[t] = acc;
      acc += v;
    }
    scratch[0] = acc;
  }
  __syncthreads();
  const float z = scratch[0];
  const float target = static_cast<float>(counter_uniform(p.seed, p.counter)) * z;
  if (part > 0.f && target >= prefix[threadIdx.x] && target < prefix[threadIdx.x] + part) {
    float acc = prefix[threadIdx.x];
    for (int64_t i = c0; i < c1; ++i) {
      const float w = weight(i);
      if (w < tau) continue;
      acc += w;
      if (acc > target) {
        atomicMax(&chosen, static_cast<int>(i));
        break;
      }
    }
  }
  __syncthreads();
  if (chosen < 0) {  // rounding at the very top: the last kept id
    int last = -1;
    for (int64_t i = c0; i < c1; ++i)
      if (weight(i) >= tau) last = static_cast<int>(i);
    if (last >= 0) atomicMax(&chosen, last);
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    tokens[blockIdx.x] = chosen;
    logprob[blockIdx.x] = logf(weight(chosen) / z);
  }
}

}  // namespace

void logits_forward(const Context& ctx, int64_t rows, int64_t V, int64_t H, const bf16* hidden, const bf16* W,
                    float* logits) {
  if (rows <= 0 || V <= 0) return;
  const float alpha = 1.f, beta = 0.f;  // logitsᵀ[V, rows] = W[V, H] · hiddenᵀ[H, rows]
  check(cublasGemmEx(ctx.blas, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(V), static_cast<int>(rows),
                     static_cast<int>(H), &alpha, W, CUDA_R_16BF, static_cast<int>(H), hidden, CUDA_R_16BF,
                     static_cast<int>(H), &beta, logits, CUDA_R_32F, static_cast<int>(V), CUBLAS_COMPUTE_32F,
                     CUBLAS_GEMM_DEFAULT),
        "logits_forward");
}

void token_logprobs(const Context& ctx, int64_t rows, int64_t V, int64_t valid, const float* logits,
                    const int32_t* targets, float* logprob, float* lse) {
  if (rows <= 0) return;
  logprob_kernel<<<static_cast<unsigned>(rows), kRowThreads, 0, ctx.stream>>>(V, valid, logits, targets, logprob, lse);
  check_launch("token_logprobs");
}

void token_logprobs_backward(const Context& ctx, int64_t rows, int64_t V, int64_t valid, const float* logits,
                             const float* lse, const int32_t* targets, const float* coef, bf16* dlogits) {
  if (rows <= 0) return;
  logprob_backward_kernel<<<blocks_for(rows * V), kThreads, 0, ctx.stream>>>(rows, V, valid, logits, lse, targets,
                                                                             coef, dlogits);
  check_launch("token_logprobs_backward");
}

void sample_tokens(const Context& ctx, int64_t rows, int64_t V, int64_t valid, const float* logits,
                   const SamplingRow* params, int32_t* tokens, float* logprob) {
  if (rows <= 0) return;
  sample_kernel<<<static_cast<unsigned>(rows), kSampleThreads, 0, ctx.stream>>>(V, valid, logits, params, tokens,
                                                                                logprob);
  check_launch("sample_tokens");
}

}  // namespace mlpt::ref::cuda
