// Router: one block per row. Experts: tokens grouped by expert (counts, scan, scatter), the two
// expert GEMMs per expert as one grouped cuBLAS call each, SwiGLU between, and a deterministic
// combine (each output row sums its own k slots in slot order). A small batch's forward may instead
// take the device-sized forms (per slot, or every expert over every row; backend_options.hpp),
// which need no host round trip. The kernels here are our own because they are index bookkeeping
// around library products (grouping, pointers, gather, combine), which no library offers fused.
#include "backends/cuda/moe.hpp"

#include <vector>

#include "backends/cuda/activations.hpp"
#include "backends/cuda/kernels.cuh"
#include "backends/cuda/linear.hpp"

namespace mlpt::ref::cuda {

using namespace detail;

namespace {

constexpr int kRouteThreads = 128;
constexpr int kMaxTopK = 32;

// Top-k by repeated block argmax (k is small); ties go to the lower index.
__global__ void route_kernel(int64_t E, int64_t k, bool norm_topk, const float* logits, const int16_t* replay,
                             int16_t* experts, float* weights, int* bad) {
  __shared__ float scratch[32];
  __shared__ float best_v[32];
  __shared__ int best_i[32];
  __shared__ int chosen[kMaxTopK];
  const int64_t r = blockIdx.x;
  const float* l = logits + r * E;
  const float mx = block_max([&] {
    float m = -INFINITY;
    for (int64_t e = threadIdx.x; e < E; e += blockDim.x) m = fmaxf(m, l[e]);
    return m;
  }(), scratch);
  if (replay) {
    if (threadIdx.x == 0)
      for (int64_t i = 0; i < k; ++i) {
        int e = replay[r * k + i];
        if (e < 0 || e >= E) {
          if (bad) atomicAdd(bad, 1);
          e = 0;
        }
        chosen[i] = e;
      }
  } else {
    for (int64_t i = 0; i < k; ++i) {
      float v = -INFINITY;
      int idx = INT32_MAX;
      for (int64_t e = threadIdx.x; e < E; e += blockDim.x) {
        bool taken = false;
        for (int64_t j = 0; j < i; ++j) taken |= chosen[j] == e;
        if (!taken && (l[e] > v || (l[e] == v && e < idx))) v = l[e], idx = static_cast<int>(e);
      }
      for (int o = 16; o > 0; o >>= 1) {  // warp argmax
        float ov = __shfl_xor_sync(0xffffffffu, v, o);
        int oi = __shfl_xor_sync(0xffffffffu, idx, o);
        if (ov > v || (ov == v && oi < idx)) v = ov, idx = oi;
      }
      if ((threadIdx.x & 31) == 0) best_v[threadIdx.x >> 5] = v, best_i[threadIdx.x >> 5] = idx;
      __syncthreads();
      if (threadIdx.x == 0) {
        float bv = best_v[0];
        int bi = best_i[0];
        for (int w = 1; w < int(blockDim.x >> 5); ++w)
          if (best_v[w] > bv || (best_v[w] == bv && best_i[w] < bi)) bv = best_v[w], bi = best_i[w];
        chosen[i] = bi;
      }
      __syncthreads();
    }
  }
  __syncthreads();
  float z = 0.f;  // the denominator: selected set (norm_topk) or all experts
  if (norm_topk) {
    for (int64_t i = threadIdx.x; i < k; i += blockDim.x) z += expf(l[chosen[i]] - mx);
  } else {
    for (int64_t e = threadIdx.x; e < E; e += blockDim.x) z += expf(l[e] - mx);
  }
  z = block_sum(z, scratch);
  for (int64_t i = threadIdx.x; i < k; i += blockDim.x) {
    experts[r * k + i] = static_cast<int16_t>(chosen[i]);
    weights[r * k + i] = expf(l[chosen[i]] - mx) / z;
  }
}

__global__ void route_backward_kernel(int64_t E, int64_t k, bool norm_topk, const float* logits,
                                      const int16_t* experts, const float* weights, const float* dweights,
                                      float* dlogits) {
  __shared__ float scratch[32];
  const int64_t r = blockIdx.x;
  const float* l = logits + r * E;
  float* dl = dlogits + r * E;
  float dot = 0.f;
  for (int64_t i = threadIdx.x; i < k; i += blockDim.x) dot += weights[r * k + i] * dweights[r * k + i];
  dot = block_sum(dot, scratch);
  if (norm_topk) {
    for (int64_t e = threadIdx.x; e < E; e += blockDim.x) dl[e] = 0.f;
  } else {
    const float mx = block_max([&] {
      float m = -INFINITY;
      for (int64_t e = threadIdx.x; e < E; e += blockDim.x) m = fmaxf(m, l[e]);
      return m;
    }(), scratch);
    float z = 0.f;
    for (int64_t e = threadIdx.x; e < E; e += blockDim.x) z += expf(l[e] - mx);
    z = block_sum(z, scratch);
    for (int64_t e = threadIdx.x; e < E; e += blockDim.x) dl[e] = -expf(l[e] - mx) / z * dot;
  }
  __syncthreads();
  if (threadIdx.x == 0)  // serial over k: an expert may appear twice in a replayed record
    for (int64_t i = 0; i < k; ++i) {
      const float w = weights[r * k + i], dw = dweights[r * k + i];
      dl[experts[r * k + i]] += norm_topk ? w * (dw - dot) : w * dw;
    }
}

// Assignment of (row, slot) pairs to experts: counts, then positions by a per-expert cursor.
__global__ void count_kernel(int64_t n, const int16_t* experts, int* counts) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    atomicAdd(counts + experts[i], 1);
}
__global__ void scan_kernel(int64_t E, const int* counts, int* start, int* cursor) {
  if (threadIdx.x != 0 || blockIdx.x != 0) return;
  int acc = 0;
  for (int64_t e = 0; e < E; ++e) start[e] = cursor[e] = acc, acc += counts[e];
  start[E] = acc;
}
__global__ void place_kernel(int64_t n, const int16_t* experts, int* cursor, int* position) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    position[i] = atomicAdd(cursor + experts[i], 1);
}
// xe[position[r*k+i]] = x[r]
__global__ void gather_kernel(int64_t rows, int64_t k, int64_t H, const bf16* x, const int* position, bf16* xe) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < rows * k * H;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t rs = i / H, c = i % H;
    xe[int64_t(position[rs]) * H + c] = x[(rs / k) * H + c];
  }
}
// y[r] += Σ_i w[r,i] · out[position[r,i]]
__global__ void combine_kernel(int64_t rows, int64_t k, int64_t H, const float* w, const int* position,
                               const bf16* out, bf16* y) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < rows * H; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / H, c = i % H;
    float acc = f32(y[i]);
    for (int64_t s = 0; s < k; ++s) acc += w[r * k + s] * f32(out[int64_t(position[r * k + s]) * H + c]);
    y[i] = to_bf(acc);
  }
}
// Per (row, slot): dweights = <dy[r], out[pos]>, dye[pos] = w · dy[r]. One block per (row, slot).
__global__ void expert_grad_kernel(int64_t k, int64_t H, const float* w, const int* position, const bf16* out,
                                   const bf16* dy, float* dweights, bf16* dye) {
  __shared__ float scratch[32];
  const int64_t rs = blockIdx.x, r = rs / k, p = position[rs];
  float dot = 0.f;
  for (int64_t c = threadIdx.x; c < H; c += blockDim.x) {
    const float d = f32(dy[r * H + c]);
    dot += d * f32(out[p * H + c]);
    dye[p * H + c] = to_bf(w[rs] * d);
  }
  dot = block_sum(dot, scratch);
  if (threadIdx.x == 0) dweights[rs] = dot;
}
// dx[r] (+)= Σ_i dxe[position[r,i]]
__global__ void scatter_grad_kernel(int64_t rows, int64_t k, int64_t H, const int* position, const bf16* dxe,
                                    bool accumulate, bf16* dx) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < rows * H; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / H, c = i % H;
    float acc = accumulate ? f32(dx[i]) : 0.f;
    for (int64_t s = 0; s < k; ++s) acc += f32(dxe[int64_t(position[r * k + s]) * H + c]);
    dx[i] = to_bf(acc);
  }
}

// The grouping of one call: device positions and the host copy of the per-expert starts.
struct Grouping {
  int* position;
  std::vector<int> start;  // E + 1, host
};

template <class T>
T* carve(char*& at, int64_t n) {
  T* p = reinterpret_cast<T*>(at);
  at += (size_t(n) * sizeof(T) + 255) / 256 * 256;
  return p;
}
size_t carved(int64_t n, size_t elem) { return (size_t(n) * elem + 255) / 256 * 256; }

Grouping group_tokens(const Context& ctx, int64_t E, int64_t n, const int16_t* experts, char*& at) {
  int* counts = carve<int>(at, E);
  int* start = carve<int>(at, E + 1);
  int* cursor = carve<int>(at, E);
  Grouping g{carve<int>(at, n), std::vector<int>(size_t(E + 1))};
  check(cudaMemsetAsync(counts, 0, size_t(E) * sizeof(int), ctx.stream), "experts: zero counts");
  count_kernel<<<blocks_for(n), kThreads, 0, ctx.stream>>>(n, experts, counts);
  check_launch("experts: count");
  scan_kernel<<<1, 1, 0, ctx.stream>>>(E, counts, start, cursor);
  check_launch("experts: scan");
  place_kernel<<<blocks_for(n), kThreads, 0, ctx.stream>>>(n, experts, cursor, g.position);
  check_launch("experts: place");
  check(cudaMemcpyAsync(g.start.data(), start, size_t(E + 1) * sizeof(int), cudaMemcpyDeviceToHost, ctx.stream),
        "experts: counts to host");
  check(cudaStreamSynchronize(ctx.stream), "experts: synchronise");
  return g;
}

size_t grouping_bytes(int64_t E, int64_t n) {
  return carved(E, 4) + carved(E + 1, 4) + carved(E, 4) + carved(n, 4);
}

// The activations of every (row, slot): xe [n, H], gu [n, 2I], h [n, I], out [n, H].
struct ExpertActs {
  bf16 *xe, *gu, *h, *out;
};

ExpertActs expert_forward(const Context& ctx, const MoeShape& s, int64_t rows, const bf16* x, const Grouping& g,
                          const bf16* gate_up, const bf16* down, char*& at) {
  const int64_t H = s.hidden, I = s.intermediate, n = rows * s.top_k;
  ExpertActs a{carve<bf16>(at, n * H), carve<bf16>(at, n * 2 * I), carve<bf16>(at, n * I), carve<bf16>(at, n * H)};
  gather_kernel<<<blocks_for(n * H), kThreads, 0, ctx.stream>>>(rows, s.top_k, H, x, g.position, a.xe);
  check_launch("experts: gather");
  std::vector<LinearGroup> up, dn;
  for (int64_t e = 0; e < s.num_experts; ++e) {
    const int64_t b = g.start[e], m = g.start[e + 1] - b;
    up.push_back({m, 2 * I, H, a.xe + b * H, gate_up + e * 2 * I * H, a.gu + b * 2 * I});
    dn.push_back({m, H, I, a.h + b * I, down + e * H * I, a.out + b * H});
  }
  linear_grouped(ctx, LinearKind::forward, up);
  swiglu_forward(ctx, n, I, a.gu, a.gu + I, 2 * I, a.h);
  linear_grouped(ctx, LinearKind::forward, dn);
  return a;
}

size_t expert_acts_bytes(const MoeShape& s, int64_t n) {
  return 2 * carved(n * s.hidden, 2) + carved(n * 2 * s.intermediate, 2) + carved(n * s.intermediate, 2);
}

// Pointers of the per-slot products: slot i = (row i / k, slot i % k) against expert e = experts[i].
__global__ void slot_pointers_kernel(int64_t n, int64_t k, int64_t H, int64_t I, const int16_t* experts,
                                     const bf16* x, const bf16* gate_up, const bf16* down, bf16* gu, bf16* h,
                                     bf16* out, const bf16** ptrs, int* position) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t e = experts[i];
    ptrs[i] = x + (i / k) * H;              // gate_up product: input
    ptrs[n + i] = gate_up + e * 2 * I * H;  //   weight
    ptrs[2 * n + i] = gu + i * 2 * I;       //   output
    ptrs[3 * n + i] = h + i * I;            // down product: input
    ptrs[4 * n + i] = down + e * H * I;     //   weight
    ptrs[5 * n + i] = out + i * H;          //   output
    position[i] = static_cast<int>(i);
  }
}
// Where each (row, slot)'s output lies among every expert's outputs over every row ([E, rows, H]).
__global__ void all_experts_position_kernel(int64_t n, int64_t k, int64_t rows, const int16_t* experts,
                                            int* position) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    position[i] = static_cast<int>(int64_t(experts[i]) * rows + i / k);
}

// The forward without a host round trip: products sized on the device (ExpertForm), the same bf16
// stores as the grouped form (gate_up, SwiGLU, per-slot outputs), combined in slot order.
void device_sized_forward(const Context& ctx, const MoeShape& s, int64_t rows, ExpertForm form, const bf16* x,
                          const int16_t* experts, const float* weights, const bf16* gate_up, const bf16* down,
                          bf16* y, DeviceBuffer& scratch) {
  const int64_t H = s.hidden, I = s.intermediate, E = s.num_experts, k = s.top_k, n = rows * k;
  const int64_t m = form == ExpertForm::per_slot ? n : E * rows;  // rows of the products
  scratch.reserve(carved(n, 4) + carved(6 * n, sizeof(void*)) + carved(m * 2 * I, 2) + carved(m * I, 2) +
                  carved(m * H, 2));
  char* at = scratch.as<char>();
  int* position = carve<int>(at, n);
  const bf16** ptrs = carve<const bf16*>(at, 6 * n);
  bf16* gu = carve<bf16>(at, m * 2 * I);
  bf16* h = carve<bf16>(at, m * I);
  bf16* out = carve<bf16>(at, m * H);
  if (form == ExpertForm::per_slot) {
    slot_pointers_kernel<<<blocks_for(n), kThreads, 0, ctx.stream>>>(n, k, H, I, experts, x, gate_up, down,
                                                                     gu, h, out, ptrs, position);
    check_launch("experts: slot pointers");
    linear_forward_gathered(ctx, n, 2 * I, H, ptrs, ptrs + n, const_cast<bf16* const*>(ptrs + 2 * n));
    swiglu_forward(ctx, n, I, gu, gu + I, 2 * I, h);
    linear_forward_gathered(ctx, n, H, I, ptrs + 3 * n, ptrs + 4 * n, const_cast<bf16* const*>(ptrs + 5 * n));
  } else {
    all_experts_position_kernel<<<blocks_for(n), kThreads, 0, ctx.stream>>>(n, k, rows, experts, position);
    check_launch("experts: positions");
    linear_forward_strided(ctx, E, rows, 2 * I, H, x, 0, gate_up, 2 * I * H, gu, rows * 2 * I);
    swiglu_forward(ctx, m, I, gu, gu + I, 2 * I, h);
    linear_forward_strided(ctx, E, rows, H, I, h, rows * I, down, H * I, out, rows * H);
  }
  combine_kernel<<<blocks_for(rows * H), kThreads, 0, ctx.stream>>>(rows, k, H, weights, position, out, y);
  check_launch("experts: combine");
}

}  // namespace

void route(const Context& ctx, const MoeShape& s, int64_t rows, const float* logits, const int16_t* replay,
           int16_t* experts, float* weights, int* bad_replays) {
  if (rows <= 0) return;
  if (s.top_k > kMaxTopK || s.top_k > s.num_experts) check(cudaErrorInvalidValue, "route: top_k above 32 or E");
  route_kernel<<<static_cast<unsigned>(rows), kRouteThreads, 0, ctx.stream>>>(
      s.num_experts, s.top_k, s.norm_topk_prob, logits, replay, experts, weights, bad_replays);
  check_launch("route");
}

void route_backward(const Context& ctx, const MoeShape& s, int64_t rows, const float* logits, const int16_t* experts,
                    const float* weights, const float* dweights, float* dlogits) {
  if (rows <= 0) return;
  route_backward_kernel<<<static_cast<unsigned>(rows), kRouteThreads, 0, ctx.stream>>>(
      s.num_experts, s.top_k, s.norm_topk_prob, logits, experts, weights, dweights, dlogits);
  check_launch("route_backward");
}

void experts_forward(const Context& ctx, const MoeShape& s, int64_t rows, const bf16* x, const int16_t* experts,
                     const float* weights, const bf16* gate_up, const bf16* down, bf16* y, DeviceBuffer& scratch) {
  if (rows <= 0) return;
  const ExpertForm form = expert_form(ctx, rows, s.top_k, s.num_experts);
  if (form == ExpertForm::per_slot || form == ExpertForm::all_experts) {
    device_sized_forward(ctx, s, rows, form, x, experts, weights, gate_up, down, y, scratch);
    return;
  }
  const int64_t n = rows * s.top_k, H = s.hidden;
  scratch.reserve(grouping_bytes(s.num_experts, n) + expert_acts_bytes(s, n));
  char* at = scratch.as<char>();
  Grouping g = group_tokens(ctx, s.num_experts, n, experts, at);
  ExpertActs a = expert_forward(ctx, s, rows, x, g, gate_up, down, at);
  combine_kernel<<<blocks_for(rows * H), kThreads, 0, ctx.stream>>>(rows, s.top_k, H, weights, g.position, a.out, y);
  check_launch("experts: combine");
}

void experts_backward(const Context& ctx, const MoeShape& s, int64_t rows, const bf16* x, const int16_t* experts,
                      const float* weights, const bf16* gate_up, const bf16* down, const bf16* dy, bf16* dx,
                      bool accumulate_dx, float* dweights, float* dgate_up, float* ddown, DeviceBuffer& scratch) {
  if (rows <= 0) return;
  const int64_t n = rows * s.top_k, H = s.hidden, I = s.intermediate, k = s.top_k;
  scratch.reserve(grouping_bytes(s.num_experts, n) + expert_acts_bytes(s, n) + carved(n * H, 2) +
                  carved(n * I, 2) + carved(n * 2 * I, 2) + carved(n * H, 2));
  char* at = scratch.as<char>();
  Grouping g = group_tokens(ctx, s.num_experts, n, experts, at);
  ExpertActs a = expert_forward(ctx, s, rows, x, g, gate_up, down, at);
  bf16* dye = carve<bf16>(at, n * H);
  bf16* dh = carve<bf16>(at, n * I);
  bf16* dgu = carve<bf16>(at, n * 2 * I);
  bf16* dxe = carve<bf16>(at, n * H);
  expert_grad_kernel<<<static_cast<unsigned>(n), kThreads, 0, ctx.stream>>>(k, H, weights, g.position, a.out, dy,
                                                                            dweights, dye);
  check_launch("experts: output gradients");
  std::vector<LinearGroup> dn_in, dn_w, up_in, up_w;
  for (int64_t e = 0; e < s.num_experts; ++e) {
    const int64_t b = g.start[e], m = g.start[e + 1] - b;
    dn_in.push_back({m, H, I, dye + b * H, down + e * H * I, dh + b * I});
    if (ddown) dn_w.push_back({m, H, I, dye + b * H, a.h + b * I, ddown + e * H * I});
    up_in.push_back({m, 2 * I, H, dgu + b * 2 * I, gate_up + e * 2 * I * H, dxe + b * H});
    if (dgate_up) up_w.push_back({m, 2 * I, H, dgu + b * 2 * I, a.xe + b * H, dgate_up + e * 2 * I * H});
  }
  linear_grouped(ctx, LinearKind::backward_input, dn_in);
  linear_grouped(ctx, LinearKind::backward_weight, dn_w);
  swiglu_backward(ctx, n, I, a.gu, a.gu + I, 2 * I, dh, dgu, dgu + I, 2 * I);
  linear_grouped(ctx, LinearKind::backward_input, up_in);
  linear_grouped(ctx, LinearKind::backward_weight, up_w);
  scatter_grad_kernel<<<blocks_for(rows * H), kThreads, 0, ctx.stream>>>(rows, k, H, g.position, dxe, accumulate_dx,
                                                                         dx);
  check_launch("experts: input gradients");
}

}  // namespace mlpt::ref::cuda
