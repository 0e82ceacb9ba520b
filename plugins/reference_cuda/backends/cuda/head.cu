// Row reductions over the vocabulary: one block per row. Sampling finds the top-p edge and the
// draw's level by bisection on the weights' float bits, and ids by prefixes over contiguous id
// ranges (no sort of the vocabulary).
#include "backends/cuda/head.hpp"

#include "backends/cuda/kernels.cuh"
#include "backends/cuda/linear.hpp"
#include "model/counter_uniform.hpp"

namespace mlpt::ref::cuda {

using namespace detail;

namespace {

constexpr int kRowThreads = 256;
constexpr int kSampleThreads = 1024;

// The max of a row's first `valid` logits and Σ exp(l − max) over them, in every thread of the block.
__device__ void row_max_sum(const float* l, int64_t valid, float* scratch, float& m, float& z) {
  m = -INFINITY;
  for (int64_t i = threadIdx.x; i < valid; i += blockDim.x) m = fmaxf(m, l[i]);
  m = block_max(m, scratch);
  z = 0.f;
  for (int64_t i = threadIdx.x; i < valid; i += blockDim.x) z += expf(l[i] - m);
  z = block_sum(z, scratch);
}

__global__ void logprob_kernel(int64_t V, int64_t valid, const float* logits, const int32_t* targets, float* logprob,
                               float* lse) {
  __shared__ float scratch[32];
  const float* l = logits + blockIdx.x * V;
  float m, z;
  row_max_sum(l, valid, scratch, m, z);
  if (threadIdx.x == 0) {
    const float row_lse = m + logf(z);
    lse[blockIdx.x] = row_lse;
    logprob[blockIdx.x] = l[targets[blockIdx.x]] - row_lse;
  }
}

// logprob_kernel's max and sum over this rank's real ids, and the target's logit where it holds it.
__global__ void vocab_stats_kernel(int64_t V, int64_t valid, const float* logits, const int32_t* targets,
                                   float* stats) {
  __shared__ float scratch[32];
  const float* l = logits + blockIdx.x * V;
  float m, z;
  row_max_sum(l, valid, scratch, m, z);
  if (threadIdx.x == 0) {
    const int32_t t = targets[blockIdx.x];
    const bool holds = t >= 0 && t < V;
    float* s = stats + blockIdx.x * 4;
    s[0] = m, s[1] = z, s[2] = holds ? l[t] : 0.f, s[3] = holds ? 1.f : 0.f;
  }
}

__global__ void vocab_combine_kernel(int64_t rows, int64_t parts, const float* stats, float* logprob, float* lse) {
  const int64_t r = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (r >= rows) return;
  double mx = -INFINITY, z = 0, target = nan("");
  for (int64_t p = 0; p < parts; ++p) mx = fmax(mx, double(stats[(p * rows + r) * 4]));
  for (int64_t p = 0; p < parts; ++p) {
    const float* s = stats + (p * rows + r) * 4;
    if (s[0] > -INFINITY) z += double(s[1]) * exp(double(s[0]) - mx);
    if (s[3] != 0.f) target = s[2];
  }
  lse[r] = float(mx + log(z));
  logprob[r] = float(target - mx - log(z));
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

// Without top-p the draw walks the ids in id order; with top-p it walks the kept ids from the most
// to the least likely, ties in id order: the CPU sampler's two walks (model/sampling.hpp).
__global__ void sample_kernel(int64_t V, int64_t valid, const float* logits, const SamplingRow* params,
                              int32_t* tokens, float* logprob) {
  __shared__ float scratch[32];
  __shared__ float prefix[kSampleThreads];
  __shared__ int ties_before[kSampleThreads];
  __shared__ int chosen;
  const float* l = logits + blockIdx.x * V;
  const SamplingRow p = params[blockIdx.x];
  const float inv_t = 1.f / p.temperature;
  float m = -INFINITY;
  for (int64_t i = threadIdx.x; i < valid; i += blockDim.x) m = fmaxf(m, l[i] * inv_t);
  m = block_max(m, scratch);
  auto weight = [&](int64_t i) { return __expf(l[i] * inv_t - m); };  // the max id has weight 1
  auto mass_at_least = [&](float tau) {  // the same value in every thread, and for the same tau
    float s = 0.f;
    for (int64_t i = threadIdx.x; i < valid; i += blockDim.x) {
      const float w = weight(i);
      if (w >= tau) s += w;
    }
    return block_sum(s, scratch);
  };
  const int64_t chunk = (valid + blockDim.x - 1) / blockDim.x;
  const int64_t c0 = threadIdx.x * chunk, c1 = c0 + chunk < valid ? c0 + chunk : valid;
  const double u = counter_uniform(p.seed, p.counter);
  if (threadIdx.x == 0) chosen = -1;
  float z = 0.f;
  if (p.top_p >= 1.f) {
    float part = 0.f;
    for (int64_t i = c0; i < c1; ++i) part += weight(i);
    prefix[threadIdx.x] = part;
    __syncthreads();
    if (threadIdx.x == 0) {  // exclusive scan; scratch[0] keeps the total mass
      float acc = 0.f;
      for (unsigned t = 0; t < blockDim.x; ++t) {
        const float v = prefix[t];
        prefix[t] = acc;
        acc += v;
      }
      scratch[0] = acc;
    }
    __syncthreads();
    z = scratch[0];
    const float target = static_cast<float>(u) * z;
    if (part > 0.f && target >= prefix[threadIdx.x] && target < prefix[threadIdx.x] + part) {
      float acc = prefix[threadIdx.x];
      for (int64_t i = c0; i < c1; ++i) {
        acc += weight(i);
        if (acc > target) {
          atomicMax(&chosen, static_cast<int>(i));
          break;
        }
      }
    }
    __syncthreads();
    if (chosen < 0) {  // rounding at the very top: the last id with mass
      int last = -1;
      for (int64_t i = c0; i < c1; ++i)
        if (weight(i) > 0.f) last = static_cast<int>(i);
      if (last >= 0) atomicMax(&chosen, last);
    }
  } else {
    // Every level below is some id's weight, found exactly by bisection on the float bits:
    // largest(lo, pred) is the largest b >= lo with pred(mass {w >= float(b)}), pred holding at lo
    // (it is not evaluated there) and failing above 1.
    auto largest = [&](unsigned lo, auto pred) {
      unsigned hi = __float_as_uint(1.f) + 1u;
      while (hi - lo > 1u) {
        const unsigned mid = lo + (hi - lo) / 2u;
        if (pred(mass_at_least(__uint_as_float(mid)))) lo = mid; else hi = mid;
      }
      return lo;
    };
    auto count_at = [&](float level) {
      float n = 0.f;
      for (int64_t i = threadIdx.x; i < valid; i += blockDim.x) n += weight(i) == level ? 1.f : 0.f;
      return static_cast<int>(block_sum(n, scratch));
    };
    // The top-p set as the CPU sampler takes it: the ids above the edge level, then the ids at the
    // edge in id order until the kept mass reaches top_p of the total.
    const float goal = p.top_p * mass_at_least(0.f);
    const unsigned edge_bits = largest(0u, [&](float mass) { return mass >= goal; });
    const float edge = __uint_as_float(edge_bits);
    const float above_edge = mass_at_least(__uint_as_float(edge_bits + 1u));
    const int at_edge = count_at(edge);
    const int kept_at_edge = max(1, min(at_edge, static_cast<int>(ceilf((goal - above_edge) / edge))));
    z = above_edge + static_cast<float>(kept_at_edge) * edge;
    // Below z, so the walk ends inside the kept set (the CPU's "last candidate" at the very top).
    const float target = fminf(static_cast<float>(u) * z, nextafterf(z, 0.f));
    // The draw's level: the largest w* whose kept mass {w >= w*} exceeds the target (z at the edge).
    const unsigned level_bits = largest(edge_bits, [&](float mass) { return mass > target; });
    const float level = __uint_as_float(level_bits);
    const float above = level_bits == edge_bits ? above_edge : mass_at_least(__uint_as_float(level_bits + 1u));
    const int available = level_bits == edge_bits ? kept_at_edge : count_at(level);
    int ties = 0;  // this thread's ids at the level
    for (int64_t i = c0; i < c1; ++i) ties += weight(i) == level ? 1 : 0;
    ties_before[threadIdx.x] = ties;
    __syncthreads();
    if (threadIdx.x == 0) {  // exclusive scan, in id order
      int acc = 0;
      for (unsigned t = 0; t < blockDim.x; ++t) {
        const int v = ties_before[t];
        ties_before[t] = acc;
        acc += v;
      }
    }
    __syncthreads();
    // The ids at the level the draw passes over (each holds `level` of the mass) before its own.
    int skip = static_cast<int>(floorf((target - above) / level));
    skip = max(0, min(skip, available - 1));
    if (skip >= ties_before[threadIdx.x] && skip < ties_before[threadIdx.x] + ties) {
      int k = skip - ties_before[threadIdx.x];
      for (int64_t i = c0; i < c1; ++i)
        if (weight(i) == level && k-- == 0) {
          chosen = static_cast<int>(i);
          break;
        }
    }
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    tokens[blockIdx.x] = chosen;
    logprob[blockIdx.x] = chosen >= 0 ? logf(weight(chosen) / z) : NAN;
  }
}

}  // namespace

void logits_forward(const Context& ctx, int64_t rows, int64_t V, int64_t H, const bf16* hidden, const bf16* W,
                    float* logits) {
  if (rows <= 0 || V <= 0) return;
  linear_forward_fp32(ctx, rows, V, H, hidden, W, logits);
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

void vocab_logprob_stats(const Context& ctx, int64_t rows, int64_t V, int64_t valid, const float* logits,
                         const int32_t* targets, float* stats) {
  if (rows <= 0) return;
  vocab_stats_kernel<<<static_cast<unsigned>(rows), kRowThreads, 0, ctx.stream>>>(V, valid, logits, targets, stats);
  check_launch("vocab_logprob_stats");
}

void vocab_logprob_combine(const Context& ctx, int64_t rows, int64_t parts, const float* stats, float* logprob,
                           float* lse) {
  if (rows <= 0) return;
  vocab_combine_kernel<<<blocks_for(rows), kThreads, 0, ctx.stream>>>(rows, parts, stats, logprob, lse);
  check_launch("vocab_logprob_combine");
}

void sample_tokens(const Context& ctx, int64_t rows, int64_t V, int64_t valid, const float* logits,
                   const SamplingRow* params, int32_t* tokens, float* logprob) {
  if (rows <= 0) return;
  sample_kernel<<<static_cast<unsigned>(rows), kSampleThreads, 0, ctx.stream>>>(V, valid, logits, params, tokens,
                                                                                logprob);
  check_launch("sample_tokens");
}

}  // namespace mlpt::ref::cuda
