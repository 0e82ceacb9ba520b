// Block per (query token, query head) for the forward and for d_q, and per (key token, query head)
// for d_k and d_v (so no block needs the score matrix and d_k/d_v need atomics only across the
// H/Hkv heads of a group). The other side streams through shared memory in tiles of 32 rows; a
// warp forms each dot product; the online softmax runs in warp 0.
#include "backends/cuda/attention.hpp"

#include "backends/cuda/kernels.cuh"

namespace mlpt::ref::cuda {

using namespace detail;

namespace {

constexpr int kTile = 32;
constexpr int kAttnThreads = 128;
constexpr int kMaxD = 256;
constexpr int kPerThread = kMaxD / kAttnThreads;

// Where sequence s keeps kv position p of kv head hk.
struct ContiguousKV {
  const bf16 *k, *v;
  const int64_t* offsets;
  int64_t Hkv, D;
  __device__ int64_t length(int64_t s) const { return offsets[s + 1] - offsets[s]; }
  __device__ int64_t row(int64_t s, int64_t p, int64_t hk) const { return ((offsets[s] + p) * Hkv + hk) * D; }
  __device__ const bf16* key(int64_t s, int64_t p, int64_t hk) const { return k + row(s, p, hk); }
  __device__ const bf16* value(int64_t s, int64_t p, int64_t hk) const { return v + row(s, p, hk); }
};
struct PagedKV {
  const bf16 *k, *v;
  const int64_t* lengths;
  const int32_t* table;
  int64_t max_blocks, block_size, Hkv, D;
  __device__ int64_t length(int64_t s) const { return lengths[s]; }
  __device__ int64_t row(int64_t s, int64_t p, int64_t hk) const {
    const int64_t block = table[s * max_blocks + p / block_size];
    return ((block * block_size + p % block_size) * Hkv + hk) * D;
  }
  __device__ const bf16* key(int64_t s, int64_t p, int64_t hk) const { return k + row(s, p, hk); }
  __device__ const bf16* value(int64_t s, int64_t p, int64_t hk) const { return v + row(s, p, hk); }
};

// The query row's place: its sequence, index among the sequence's queries, and visible kv count.
struct QueryPlace {
  int64_t s, visible;
};
template <class KV>
__device__ QueryPlace place_query(const int64_t* q_offsets, int64_t num_seqs, const KV& kv, int64_t tq) {
  const int64_t s = sequence_of(q_offsets, num_seqs, tq);
  const int64_t Q = q_offsets[s + 1] - q_offsets[s], i = tq - q_offsets[s];
  return {s, kv.length(s) - Q + i + 1};
}

// Rows j0 .. j0 + n of sequence s's keys and values (kv head hk) into the shared tiles.
template <class KV>
__device__ void load_kv_tile(const KV& kv, int64_t s, int64_t j0, int64_t n, int64_t hk, int64_t D,
                             bf16 (*ks)[kMaxD], bf16 (*vs)[kMaxD]) {
  for (int64_t x = threadIdx.x; x < n * D; x += blockDim.x) {
    const int64_t jj = x / D, d = x % D;
    ks[jj][d] = kv.key(s, j0 + jj, hk)[d];
    vs[jj][d] = kv.value(s, j0 + jj, hk)[d];
  }
}

template <class KV>
__global__ void forward_kernel(AttentionShape sh, const int64_t* q_offsets, int64_t num_seqs, KV kv, const bf16* q,
                               bf16* out, float* lse, float scale) {
  __shared__ float qs[kMaxD];
  __shared__ bf16 ks[kTile][kMaxD];
  __shared__ bf16 vs[kTile][kMaxD];
  __shared__ float p[kTile];
  __shared__ float m_s, l_s, corr_s;
  const int64_t tq = blockIdx.x, h = blockIdx.y, D = sh.head_dim, H = sh.num_heads;
  const int64_t hk = h / (H / sh.num_kv_heads);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  const QueryPlace at = place_query(q_offsets, num_seqs, kv, tq);
  for (int64_t d = threadIdx.x; d < D; d += blockDim.x) qs[d] = f32(q[(tq * H + h) * D + d]);
  if (threadIdx.x == 0) m_s = -INFINITY, l_s = 0.f;
  float o[kPerThread] = {};
  for (int64_t j0 = 0; j0 < at.visible; j0 += kTile) {
    const int64_t n = at.visible - j0 < kTile ? at.visible - j0 : kTile;
    __syncthreads();
    load_kv_tile(kv, at.s, j0, n, hk, D, ks, vs);
    __syncthreads();
    for (int64_t jj = warp; jj < n; jj += warps) {
      float acc = 0.f;
      for (int64_t d = lane; d < D; d += 32) acc += qs[d] * f32(ks[jj][d]);
      acc = warp_sum(acc);
      if (lane == 0) p[jj] = acc * scale;
    }
    __syncthreads();
    if (warp == 0) {
      const float sv = lane < n ? p[lane] : -INFINITY;
      const float m_new = fmaxf(m_s, warp_max(sv));
      const float e = lane < n ? __expf(sv - m_new) : 0.f;
      const float sum = warp_sum(e);
      if (lane < n) p[lane] = e;
      if (lane == 0) {
        corr_s = __expf(m_s - m_new);
        l_s = l_s * corr_s + sum;
        m_s = m_new;
      }
    }
    __syncthreads();
    for (int r = 0; r < kPerThread; ++r) {
      const int64_t d = threadIdx.x + int64_t(r) * blockDim.x;
      if (d >= D) continue;
      float acc = o[r] * corr_s;
      for (int64_t jj = 0; jj < n; ++jj) acc += p[jj] * f32(vs[jj][d]);
      o[r] = acc;
    }
  }
  __syncthreads();
  const float inv = l_s > 0.f ? 1.f / l_s : 0.f;
  for (int r = 0; r < kPerThread; ++r) {
    const int64_t d = threadIdx.x + int64_t(r) * blockDim.x;
    if (d < D) out[(tq * H + h) * D + d] = to_bf(o[r] * inv);
  }
  if (lse && threadIdx.x == 0) lse[tq * H + h] = m_s + logf(l_s);
}

// delta[tq, h] = dO · O (the softmax backward's row term); one warp per row.
__global__ void delta_kernel(int64_t rows, int64_t D, const bf16* out, const bf16* d_out, float* delta) {
  const int64_t r = blockIdx.x;
  float acc = 0.f;
  for (int64_t d = threadIdx.x; d < D; d += 32) acc += f32(out[r * D + d]) * f32(d_out[r * D + d]);
  acc = warp_sum(acc);
  if (threadIdx.x == 0 && r < rows) delta[r] = acc;
}

__global__ void dq_kernel(AttentionShape sh, const int64_t* q_offsets, int64_t num_seqs, ContiguousKV kv,
                          const bf16* q, const float* lse, const float* delta, const bf16* d_out, bf16* d_q,
                          float scale) {
  __shared__ float qs[kMaxD], dos[kMaxD];
  __shared__ bf16 ks[kTile][kMaxD];
  __shared__ bf16 vs[kTile][kMaxD];
  __shared__ float ds[kTile];
  const int64_t tq = blockIdx.x, h = blockIdx.y, D = sh.head_dim, H = sh.num_heads;
  const int64_t hk = h / (H / sh.num_kv_heads);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  const QueryPlace at = place_query(q_offsets, num_seqs, kv, tq);
  for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
    qs[d] = f32(q[(tq * H + h) * D + d]);
    dos[d] = f32(d_out[(tq * H + h) * D + d]);
  }
  const float row_lse = lse[tq * H + h], row_delta = delta[tq * H + h];
  float acc_q[kPerThread] = {};
  for (int64_t j0 = 0; j0 < at.visible; j0 += kTile) {
    const int64_t n = at.visible - j0 < kTile ? at.visible - j0 : kTile;
    __syncthreads();
    load_kv_tile(kv, at.s, j0, n, hk, D, ks, vs);
    __syncthreads();
    for (int64_t jj = warp; jj < n; jj += warps) {
      float s = 0.f, dp = 0.f;
      for (int64_t d = lane; d < D; d += 32) {
        s += qs[d] * f32(ks[jj][d]);
        dp += dos[d] * f32(vs[jj][d]);
      }
      s = warp_sum(s);
      dp = warp_sum(dp);
      if (lane == 0) {
        const float pr = __expf(s * scale - row_lse);
        ds[jj] = pr * (dp - row_delta);
      }
    }
    __syncthreads();
    for (int r = 0; r < kPerThread; ++r) {
      const int64_t d = threadIdx.x + int64_t(r) * blockDim.x;
      if (d >= D) continue;
      for (int64_t jj = 0; jj < n; ++jj) acc_q[r] += ds[jj] * f32(ks[jj][d]);
    }
  }
  for (int r = 0; r < kPerThread; ++r) {
    const int64_t d = threadIdx.x + int64_t(r) * blockDim.x;
    if (d < D) d_q[(tq * H + h) * D + d] = to_bf(acc_q[r] * scale);
  }
}

// Per (key token, query head): stream the queries that see this key.
__global__ void dkdv_kernel(AttentionShape sh, const int64_t* q_offsets, const int64_t* kv_offsets, int64_t num_seqs,
                            const bf16* q, const bf16* k, const bf16* v, const float* lse, const float* delta,
                            const bf16* d_out, float* dk32, float* dv32, float scale) {
  __shared__ float kk[kMaxD], vv[kMaxD];
  __shared__ bf16 qs[kTile][kMaxD];
  __shared__ bf16 dos[kTile][kMaxD];
  __shared__ float pr[kTile], ds[kTile];
  const int64_t tk = blockIdx.x, h = blockIdx.y, D = sh.head_dim, H = sh.num_heads, Hkv = sh.num_kv_heads;
  const int64_t hk = h / (H / Hkv);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  const int64_t s = sequence_of(kv_offsets, num_seqs, tk);
  const int64_t pos = tk - kv_offsets[s], L = kv_offsets[s + 1] - kv_offsets[s];
  const int64_t q0 = q_offsets[s], Q = q_offsets[s + 1] - q0;
  const int64_t first = pos - (L - Q) > 0 ? pos - (L - Q) : 0;  // first query index that sees pos
  for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
    kk[d] = f32(k[(tk * Hkv + hk) * D + d]);
    vv[d] = f32(v[(tk * Hkv + hk) * D + d]);
  }
  float acc_k[kPerThread] = {}, acc_v[kPerThread] = {};
  for (int64_t i0 = first; i0 < Q; i0 += kTile) {
    const int64_t n = Q - i0 < kTile ? Q - i0 : kTile;
    __syncthreads();
    for (int64_t x = threadIdx.x; x < n * D; x += blockDim.x) {
      const int64_t ii = x / D, d = x % D, row = ((q0 + i0 + ii) * H + h) * D + d;
      qs[ii][d] = q[row];
      dos[ii][d] = d_out[row];
    }
    __syncthreads();
    for (int64_t ii = warp; ii < n; ii += warps) {
      float sc = 0.f, dp = 0.f;
      for (int64_t d = lane; d < D; d += 32) {
        sc += f32(qs[ii][d]) * kk[d];
        dp += f32(dos[ii][d]) * vv[d];
      }
      sc = warp_sum(sc);
      dp = warp_sum(dp);
      if (lane == 0) {
        const int64_t row = (q0 + i0 + ii) * H + h;
        const float p = __expf(sc * scale - lse[row]);
        pr[ii] = p;
        ds[ii] = p * (dp - delta[row]);
      }
    }
    __syncthreads();
    for (int r = 0; r < kPerThread; ++r) {
      const int64_t d = threadIdx.x + int64_t(r) * blockDim.x;
      if (d >= D) continue;
      for (int64_t ii = 0; ii < n; ++ii) {
        acc_v[r] += pr[ii] * f32(dos[ii][d]);
        acc_k[r] += ds[ii] * f32(qs[ii][d]);
      }
    }
  }
  for (int r = 0; r < kPerThread; ++r) {
    const int64_t d = threadIdx.x + int64_t(r) * blockDim.x;
    if (d >= D) continue;
    atomicAdd(dk32 + (tk * Hkv + hk) * D + d, acc_k[r] * scale);
    atomicAdd(dv32 + (tk * Hkv + hk) * D + d, acc_v[r]);
  }
}

__global__ void paged_write_kernel(AttentionShape sh, const int64_t* q_offsets, const int64_t* kv_lengths,
                                   int64_t num_seqs, int64_t Tq, const bf16* k, const bf16* v, bf16* k_pool,
                                   bf16* v_pool, const int32_t* table, int64_t max_blocks, int64_t block_size) {
  const int64_t row = sh.num_kv_heads * sh.head_dim;
  for (int64_t x = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; x < Tq * row; x += int64_t(gridDim.x) * blockDim.x) {
    const int64_t t = x / row, e = x % row;
    const int64_t s = sequence_of(q_offsets, num_seqs, t);
    const int64_t Q = q_offsets[s + 1] - q_offsets[s];
    const int64_t p = kv_lengths[s] - Q + (t - q_offsets[s]);
    const int64_t at = (int64_t(table[s * max_blocks + p / block_size]) * block_size + p % block_size) * row + e;
    k_pool[at] = k[x];
    v_pool[at] = v[x];
  }
}

void check_shape(const AttentionShape& s, const char* op) {
  if (s.num_heads <= 0 || s.num_kv_heads <= 0 || s.num_heads % s.num_kv_heads != 0 || s.head_dim <= 0 ||
      s.head_dim > kMaxD)
    check(cudaErrorInvalidValue, op);
}

}  // namespace

void attention_forward(const Context& ctx, const AttentionShape& shape, const int64_t* q_offsets,
                       const int64_t* kv_offsets, int64_t num_seqs, int64_t num_q_tokens, const bf16* q, const bf16* k,
                       const bf16* v, bf16* out, float* lse) {
  if (num_seqs <= 0 || num_q_tokens <= 0) return;
  check_shape(shape, "attention_forward: heads must divide and head_dim be in [1, 256]");
  const ContiguousKV kv{k, v, kv_offsets, shape.num_kv_heads, shape.head_dim};
  dim3 grid(static_cast<unsigned>(num_q_tokens), static_cast<unsigned>(shape.num_heads));
  forward_kernel<<<grid, kAttnThreads, 0, ctx.stream>>>(shape, q_offsets, num_seqs, kv, q, out, lse,
                                                        rsqrtf(float(shape.head_dim)));
  check_launch("attention_forward");
}

void attention_forward_paged(const Context& ctx, const AttentionShape& shape, const int64_t* q_offsets,
                             const int64_t* kv_lengths, int64_t num_seqs, int64_t num_q_tokens, const bf16* q,
                             const bf16* k_pool, const bf16* v_pool, const int32_t* block_table, int64_t max_blocks,
                             int64_t block_size, bf16* out) {
  if (num_seqs <= 0 || num_q_tokens <= 0) return;
  check_shape(shape, "attention_forward_paged: heads must divide and head_dim be in [1, 256]");
  const PagedKV kv{k_pool, v_pool, kv_lengths, block_table, max_blocks, block_size, shape.num_kv_heads,
                   shape.head_dim};
  dim3 grid(static_cast<unsigned>(num_q_tokens), static_cast<unsigned>(shape.num_heads));
  forward_kernel<<<grid, kAttnThreads, 0, ctx.stream>>>(shape, q_offsets, num_seqs, kv, q, out,
                                                        static_cast<float*>(nullptr), rsqrtf(float(shape.head_dim)));
  check_launch("attention_forward_paged");
}

void paged_kv_write(const Context& ctx, const AttentionShape& shape, const int64_t* q_offsets,
                    const int64_t* kv_lengths, int64_t num_seqs, int64_t num_q_tokens, const bf16* k, const bf16* v,
                    bf16* k_pool, bf16* v_pool, const int32_t* block_table, int64_t max_blocks, int64_t block_size) {
  if (num_seqs <= 0 || num_q_tokens <= 0) return;
  const int64_t n = num_q_tokens * shape.num_kv_heads * shape.head_dim;
  paged_write_kernel<<<blocks_for(n), kThreads, 0, ctx.stream>>>(shape, q_offsets, kv_lengths, num_seqs, num_q_tokens,
                                                                 k, v, k_pool, v_pool, block_table, max_blocks,
                                                                 block_size);
  check_launch("paged_kv_write");
}

void attention_backward(const Context& ctx, const AttentionShape& shape, const int64_t* q_offsets,
                        const int64_t* kv_offsets, int64_t num_seqs, int64_t num_q_tokens, int64_t num_kv_tokens,
                        const bf16* q, const bf16* k, const bf16* v, const bf16* out, const float* lse,
                        const bf16* d_out, bf16* d_q, bf16* d_k, bf16* d_v, DeviceBuffer& scratch) {
  if (num_seqs <= 0) return;
  check_shape(shape, "attention_backward: heads must divide and head_dim be in [1, 256]");
  const int64_t H = shape.num_heads, D = shape.head_dim, kv_elems = num_kv_tokens * shape.num_kv_heads * D;
  scratch.reserve(size_t(2 * kv_elems + num_q_tokens * H) * sizeof(float));
  float* dk32 = scratch.as<float>();
  float* dv32 = dk32 + kv_elems;
  float* delta = dv32 + kv_elems;
  check(cudaMemsetAsync(dk32, 0, size_t(2 * kv_elems) * sizeof(float), ctx.stream), "attention_backward: zero");
  const float scale = rsqrtf(float(D));
  if (num_q_tokens > 0) {
    delta_kernel<<<static_cast<unsigned>(num_q_tokens * H), 32, 0, ctx.stream>>>(num_q_tokens * H, D, out, d_out,
                                                                                 delta);
    check_launch("attention_backward(delta)");
    const ContiguousKV kv{k, v, kv_offsets, shape.num_kv_heads, D};
    dim3 gq(static_cast<unsigned>(num_q_tokens), static_cast<unsigned>(H));
    dq_kernel<<<gq, kAttnThreads, 0, ctx.stream>>>(shape, q_offsets, num_seqs, kv, q, lse, delta, d_out, d_q, scale);
    check_launch("attention_backward(dq)");
  }
  if (num_kv_tokens > 0) {
    dim3 gk(static_cast<unsigned>(num_kv_tokens), static_cast<unsigned>(H));
    dkdv_kernel<<<gk, kAttnThreads, 0, ctx.stream>>>(shape, q_offsets, kv_offsets, num_seqs, q, k, v, lse, delta,
                                                     d_out, dk32, dv32, scale);
    check_launch("attention_backward(dk, dv)");
    to_bf16(ctx, kv_elems, dk32, d_k);
    to_bf16(ctx, kv_elems, dv32, d_v);
  }
}

}  // namespace mlpt::ref::cuda
