// Recurrent form: block = (sequence, value head, 32 value columns), one warp, a column per thread
// (columns of the state never interact). Chunked form: block = (sequence, value head, 32 columns),
// 256 threads, per chunk the in-chunk products in shared memory and one forward substitution per
// column: V' = (I + A)^{-1} (diag(β) V − diag(βΓ) K̂ S), which folds §2.4.7's U − W S into one solve.
// Backward: block = (sequence, value head), the adjoint G in shared memory, states from scratch.
#include "backends/cuda/gdn.hpp"

#include <algorithm>

#include "backends/cuda/kernels.cuh"

namespace mlpt::ref::cuda {

using namespace detail;

namespace {

constexpr int kCols = 32;        // value columns per block (recurrent, chunked)
constexpr int64_t kChunk = 64;   // §2.4.7
constexpr int kChunkThreads = 256;
constexpr int kBackThreads = 256;

struct Dims {
  int64_t Hk, Hv, dk, dv, hk;  // hk: the key head of this block's value head
  __device__ Dims(const GdnShape& s, int64_t h)
      : Hk(s.num_key_heads), Hv(s.num_value_heads), dk(s.key_dim), dv(s.value_dim),
        hk(h / (s.num_value_heads / s.num_key_heads)) {}
};

__global__ void recurrent_kernel(GdnShape shape, const int64_t* offsets, const float* q, const float* k,
                                 const bf16* v, const float* g, const float* beta, float* const* states, bf16* out) {
  extern __shared__ float sh[];
  const int64_t seq = blockIdx.x, h = blockIdx.y, j = int64_t(blockIdx.z) * kCols + threadIdx.x;
  const Dims d(shape, h);
  const bool active = j < d.dv;
  float* S = sh;                 // [dk][kCols]: this thread's column is S[i * kCols + tid]
  float* kv = sh + d.dk * kCols;  // [dk]
  float* qv = kv + d.dk;          // [dk]
  float* state = states ? states[seq] : nullptr;
  float* Sg = state ? state + h * d.dk * d.dv : nullptr;
  for (int64_t i = 0; i < d.dk; ++i) S[i * kCols + threadIdx.x] = active && Sg ? Sg[i * d.dv + j] : 0.f;
  for (int64_t t = offsets[seq]; t < offsets[seq + 1]; ++t) {
    __syncthreads();  // the previous token is done with kv, qv
    for (int64_t i = threadIdx.x; i < d.dk; i += blockDim.x) {
      kv[i] = k[(t * d.Hk + d.hk) * d.dk + i];
      qv[i] = q[(t * d.Hk + d.hk) * d.dk + i];
    }
    __syncthreads();
    if (!active) continue;
    const float alpha = expf(g[t * d.Hv + h]), be = beta[t * d.Hv + h];
    float w = 0.f;
    for (int64_t i = 0; i < d.dk; ++i) w += S[i * kCols + threadIdx.x] * kv[i];
    const float u = be * (f32(v[(t * d.Hv + h) * d.dv + j]) - alpha * w);
    float o = 0.f;
    for (int64_t i = 0; i < d.dk; ++i) {
      const float sv = alpha * S[i * kCols + threadIdx.x] + kv[i] * u;
      S[i * kCols + threadIdx.x] = sv;
      o += sv * qv[i];
    }
    out[(t * d.Hv + h) * d.dv + j] = to_bf(o);
  }
  if (active && Sg)
    for (int64_t i = 0; i < d.dk; ++i) Sg[i * d.dv + j] = S[i * kCols + threadIdx.x];
}

size_t chunked_shared_floats(int64_t dk) {
  return size_t(2 * kChunk * (dk + 1) + 2 * kChunk * kChunk + dk * kCols + kChunk * kCols + 2 * kChunk);
}

__global__ void chunked_kernel(GdnShape shape, const int64_t* offsets, const float* q, const float* k, const bf16* v,
                               const float* g, const float* beta, float* const* states, bf16* out) {
  extern __shared__ float sh[];
  const int64_t seq = blockIdx.x, h = blockIdx.y, j0 = int64_t(blockIdx.z) * kCols;
  const Dims d(shape, h);
  const int64_t ld = d.dk + 1;  // padded rows: K[jj][·] across threads hits distinct banks
  float* K = sh;                          // [C][ld]
  float* Q = K + kChunk * ld;             // [C][ld]
  float* A = Q + kChunk * ld;             // [C][C] strictly lower: β_i k_i·k_j e^{γi−γj}
  float* P = A + kChunk * kChunk;         // [C][C] lower incl. diagonal: q_i·k_j e^{γi−γj}
  float* S = P + kChunk * kChunk;         // [dk][kCols]
  float* Vp = S + d.dk * kCols;           // [C][kCols]
  float* gam = Vp + kChunk * kCols;       // [C] in-chunk cumulative log decay
  float* bet = gam + kChunk;              // [C]
  float* state = states ? states[seq] : nullptr;
  float* Sg = state ? state + h * d.dk * d.dv : nullptr;
  for (int64_t x = threadIdx.x; x < d.dk * kCols; x += blockDim.x) {
    const int64_t i = x / kCols, c = j0 + x % kCols;
    S[x] = Sg && c < d.dv ? Sg[i * d.dv + c] : 0.f;
  }
  const int64_t begin = offsets[seq], end = offsets[seq + 1];
  for (int64_t cs = begin; cs < end; cs += kChunk) {
    const int64_t n = end - cs < kChunk ? end - cs : kChunk;
    __syncthreads();  // the previous chunk is done with every shared array
    for (int64_t x = threadIdx.x; x < n * d.dk; x += blockDim.x) {
      const int64_t i = x / d.dk, e = x % d.dk, src = ((cs + i) * d.Hk + d.hk) * d.dk + e;
      K[i * ld + e] = k[src];
      Q[i * ld + e] = q[src];
    }
    if (threadIdx.x == 0) {
      float acc = 0.f;
      for (int64_t i = 0; i < n; ++i) {
        acc += g[(cs + i) * d.Hv + h];
        gam[i] = acc;
        bet[i] = beta[(cs + i) * d.Hv + h];
      }
    }
    __syncthreads();
    for (int64_t x = threadIdx.x; x < n * n; x += blockDim.x) {
      const int64_t i = x / n, jj = x % n;
      float a = 0.f, p = 0.f;
      if (jj <= i) {
        float kk = 0.f, qk = 0.f;
        for (int64_t e = 0; e < d.dk; ++e) {
          kk += K[i * ld + e] * K[jj * ld + e];
          qk += Q[i * ld + e] * K[jj * ld + e];
        }
        const float decay = expf(gam[i] - gam[jj]);
        a = jj < i ? bet[i] * kk * decay : 0.f;
        p = qk * decay;
      }
      A[i * kChunk + jj] = a;
      P[i * kChunk + jj] = p;
    }
    for (int64_t x = threadIdx.x; x < n * kCols; x += blockDim.x) {  // right-hand side β(v − Γ Sᵀk)
      const int64_t i = x / kCols, c = x % kCols, col = j0 + c;
      float ks = 0.f;
      for (int64_t e = 0; e < d.dk; ++e) ks += K[i * ld + e] * S[e * kCols + c];
      Vp[x] = col < d.dv ? bet[i] * (f32(v[((cs + i) * d.Hv + h) * d.dv + col]) - expf(gam[i]) * ks) : 0.f;
    }
    __syncthreads();
    for (int64_t c = threadIdx.x; c < kCols; c += blockDim.x)  // (I + A) V' = rhs, forward substitution
      for (int64_t i = 1; i < n; ++i) {
        float acc = Vp[i * kCols + c];
        for (int64_t jj = 0; jj < i; ++jj) acc -= A[i * kChunk + jj] * Vp[jj * kCols + c];
        Vp[i * kCols + c] = acc;
      }
    __syncthreads();
    for (int64_t x = threadIdx.x; x < n * kCols; x += blockDim.x) {  // O = diag(Γ) Q S + P V'
      const int64_t i = x / kCols, c = x % kCols, col = j0 + c;
      if (col >= d.dv) continue;
      float qs = 0.f, pv = 0.f;
      for (int64_t e = 0; e < d.dk; ++e) qs += Q[i * ld + e] * S[e * kCols + c];
      for (int64_t jj = 0; jj <= i; ++jj) pv += P[i * kChunk + jj] * Vp[jj * kCols + c];
      out[((cs + i) * d.Hv + h) * d.dv + col] = to_bf(expf(gam[i]) * qs + pv);
    }
    __syncthreads();
    const float gl = gam[n - 1];
    for (int64_t x = threadIdx.x; x < d.dk * kCols; x += blockDim.x) {  // S = Γ_n S + Kᵀ diag(e^{γn−γ}) V'
      const int64_t e = x / kCols, c = x % kCols;
      float acc = expf(gl) * S[x];
      for (int64_t i = 0; i < n; ++i) acc += expf(gl - gam[i]) * K[i * ld + e] * Vp[i * kCols + c];
      S[x] = acc;
    }
  }
  __syncthreads();
  if (Sg)
    for (int64_t x = threadIdx.x; x < d.dk * kCols; x += blockDim.x) {
      const int64_t i = x / kCols, c = j0 + x % kCols;
      if (c < d.dv) Sg[i * d.dv + c] = S[x];
    }
}

// One recurrence step on a shared [dk][dv] state, a column per thread (no inter-thread traffic).
__device__ void step_columns(float* S, const float* kv, const float* vv, float alpha, float be, int64_t dk,
                             int64_t dv) {
  for (int64_t j = threadIdx.x; j < dv; j += blockDim.x) {
    float w = 0.f;
    for (int64_t i = 0; i < dk; ++i) w += S[i * dv + j] * kv[i];
    const float u = be * (vv[j] - alpha * w);
    for (int64_t i = 0; i < dk; ++i) S[i * dv + j] = alpha * S[i * dv + j] + kv[i] * u;
  }
}

size_t backward_shared_floats(int64_t dk, int64_t dv) { return size_t(2 * dk * dv + 2 * dk + 4 * dv + 32); }

// scratch per block: [max_chunks] boundary states, then [kChunk] recomputed states, each dk*dv.
__global__ void backward_kernel(GdnShape shape, const int64_t* offsets, const float* q, const float* k,
                                const bf16* v, const float* g, const float* beta, const bf16* d_out, float* d_q,
                                float* d_k, bf16* d_v, float* d_g, float* d_beta, float* scratch,
                                int64_t max_chunks) {
  extern __shared__ float sh[];
  const int64_t seq = blockIdx.x, h = blockIdx.y;
  const Dims d(shape, h);
  const int64_t SS = d.dk * d.dv;
  float* G = sh;            // [dk][dv] adjoint of the state
  float* S = G + SS;        // [dk][dv] state (forward sweeps)
  float* qv = S + SS;       // [dk]
  float* kv = qv + d.dk;    // [dk]
  float* vv = kv + d.dk;    // [dv]
  float* dov = vv + d.dv;   // [dv]
  float* uu = dov + d.dv;   // [dv]
  float* dw = uu + d.dv;    // [dv]
  float* red = dw + d.dv;    // [32]
  float* bound = scratch + (seq * d.Hv + h) * (max_chunks + kChunk) * SS;
  float* steps = bound + max_chunks * SS;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  const int64_t begin = offsets[seq], end = offsets[seq + 1];
  const int64_t nch = (end - begin + kChunk - 1) / kChunk;

  auto load_kv = [&](int64_t t) {
    __syncthreads();
    for (int64_t i = threadIdx.x; i < d.dk; i += blockDim.x) {
      kv[i] = k[(t * d.Hk + d.hk) * d.dk + i];
      qv[i] = q[(t * d.Hk + d.hk) * d.dk + i];
    }
    for (int64_t j = threadIdx.x; j < d.dv; j += blockDim.x) {
      vv[j] = f32(v[(t * d.Hv + h) * d.dv + j]);
      dov[j] = f32(d_out[(t * d.Hv + h) * d.dv + j]);
    }
    __syncthreads();
  };

  for (int64_t x = threadIdx.x; x < SS; x += blockDim.x) S[x] = 0.f, G[x] = 0.f;
  for (int64_t c = 0; c < nch; ++c) {  // sweep: the state entering every chunk
    __syncthreads();
    for (int64_t x = threadIdx.x; x < SS; x += blockDim.x) bound[c * SS + x] = S[x];
    const int64_t cs = begin + c * kChunk, ce = cs + kChunk < end ? cs + kChunk : end;
    for (int64_t t = cs; t < ce; ++t) {
      load_kv(t);
      step_columns(S, kv, vv, expf(g[t * d.Hv + h]), beta[t * d.Hv + h], d.dk, d.dv);
    }
  }
  for (int64_t c = nch - 1; c >= 0; --c) {
    const int64_t cs = begin + c * kChunk, ce = cs + kChunk < end ? cs + kChunk : end;
    __syncthreads();
    for (int64_t x = threadIdx.x; x < SS; x += blockDim.x) S[x] = bound[c * SS + x];
    for (int64_t t = cs; t < ce; ++t) {  // recompute S_t for the chunk
      load_kv(t);
      step_columns(S, kv, vv, expf(g[t * d.Hv + h]), beta[t * d.Hv + h], d.dk, d.dv);
      __syncthreads();
      for (int64_t x = threadIdx.x; x < SS; x += blockDim.x) steps[(t - cs) * SS + x] = S[x];
    }
    for (int64_t t = ce - 1; t >= cs; --t) {
      const float* St = steps + (t - cs) * SS;
      const float* Sp = t == cs ? bound + c * SS : steps + (t - cs - 1) * SS;  // S_{t-1}
      const float alpha = expf(g[t * d.Hv + h]), be = beta[t * d.Hv + h];
      load_kv(t);
      for (int64_t i = warp; i < d.dk; i += warps) {  // dq = S_t dO
        float acc = 0.f;
        for (int64_t j = lane; j < d.dv; j += 32) acc += St[i * d.dv + j] * dov[j];
        acc = warp_sum(acc);
        if (lane == 0) atomicAdd(d_q + (t * d.Hk + d.hk) * d.dk + i, acc);
      }
      for (int64_t x = threadIdx.x; x < SS; x += blockDim.x) G[x] += qv[x / d.dv] * dov[x % d.dv];
      __syncthreads();
      float dbeta = 0.f;
      for (int64_t j = threadIdx.x; j < d.dv; j += blockDim.x) {  // per column: w, u, du
        float w = 0.f, du = 0.f;
        for (int64_t i = 0; i < d.dk; ++i) {
          w += Sp[i * d.dv + j] * kv[i];
          du += G[i * d.dv + j] * kv[i];
        }
        w *= alpha;
        uu[j] = be * (vv[j] - w);
        dw[j] = -be * du;
        d_v[(t * d.Hv + h) * d.dv + j] = to_bf(be * du);
        dbeta += du * (vv[j] - w);
      }
      dbeta = block_sum(dbeta, red);
      __syncthreads();
      for (int64_t i = warp; i < d.dk; i += warps) {  // dk = G u + S̃ dw
        float acc = 0.f;
        for (int64_t j = lane; j < d.dv; j += 32) acc += G[i * d.dv + j] * uu[j] + alpha * Sp[i * d.dv + j] * dw[j];
        acc = warp_sum(acc);
        if (lane == 0) atomicAdd(d_k + (t * d.Hk + d.hk) * d.dk + i, acc);
      }
      __syncthreads();
      float dalpha = 0.f;
      for (int64_t x = threadIdx.x; x < SS; x += blockDim.x) {  // G̃ = G + k dwᵀ; dα = <G̃, S_{t-1}>; G = α G̃
        const float gt = G[x] + kv[x / d.dv] * dw[x % d.dv];
        dalpha += gt * Sp[x];
        G[x] = alpha * gt;
      }
      dalpha = block_sum(dalpha, red);
      if (threadIdx.x == 0) {
        d_g[t * d.Hv + h] = alpha * dalpha;
        d_beta[t * d.Hv + h] = dbeta;
      }
    }
  }
}

void check_shape(const GdnShape& s, const char* op) {
  if (s.num_key_heads <= 0 || s.num_value_heads % s.num_key_heads != 0 || s.key_dim <= 0 || s.value_dim <= 0)
    check(cudaErrorInvalidValue, op);
}

void set_shared(const void* kernel, size_t bytes, const char* op) {
  if (bytes > 227 * 1024) check(cudaErrorInvalidValue, op);
  check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)), op);
}

}  // namespace

void gdn_recurrent_forward(const Context& ctx, const GdnShape& s, const int64_t* offsets, int64_t num_seqs,
                           const float* q, const float* k, const bf16* v, const float* g, const float* beta,
                           float* const* states, bf16* out) {
  if (num_seqs <= 0) return;
  check_shape(s, "gdn_recurrent_forward: bad shape");
  const size_t bytes = size_t(s.key_dim * kCols + 2 * s.key_dim) * sizeof(float);
  set_shared(reinterpret_cast<const void*>(&recurrent_kernel), bytes, "gdn_recurrent_forward: shared memory");
  dim3 grid(static_cast<unsigned>(num_seqs), static_cast<unsigned>(s.num_value_heads),
            static_cast<unsigned>((s.value_dim + kCols - 1) / kCols));
  recurrent_kernel<<<grid, kCols, bytes, ctx.stream>>>(s, offsets, q, k, v, g, beta, states, out);
  check_launch("gdn_recurrent_forward");
}

void gdn_chunked_forward(const Context& ctx, const GdnShape& s, const int64_t* offsets, int64_t num_seqs,
                         const float* q, const float* k, const bf16* v, const float* g, const float* beta,
                         float* const* states, bf16* out) {
  if (num_seqs <= 0) return;
  check_shape(s, "gdn_chunked_forward: bad shape");
  const size_t bytes = chunked_shared_floats(s.key_dim) * sizeof(float);
  set_shared(reinterpret_cast<const void*>(&chunked_kernel), bytes, "gdn_chunked_forward: shared memory");
  dim3 grid(static_cast<unsigned>(num_seqs), static_cast<unsigned>(s.num_value_heads),
            static_cast<unsigned>((s.value_dim + kCols - 1) / kCols));
  chunked_kernel<<<grid, kChunkThreads, bytes, ctx.stream>>>(s, offsets, q, k, v, g, beta, states, out);
  check_launch("gdn_chunked_forward");
}

void gdn_backward(const Context& ctx, const GdnShape& s, const int64_t* offsets, const int64_t* host_offsets,
                  int64_t num_seqs, const float* q, const float* k, const bf16* v, const float* g, const float* beta,
                  const bf16* d_out, float* d_q, float* d_k, bf16* d_v, float* d_g, float* d_beta,
                  DeviceBuffer& scratch) {
  if (num_seqs <= 0) return;
  check_shape(s, "gdn_backward: bad shape");
  const int64_t T = host_offsets[num_seqs] - host_offsets[0];
  int64_t max_len = 0;
  for (int64_t i = 0; i < num_seqs; ++i) max_len = std::max(max_len, host_offsets[i + 1] - host_offsets[i]);
  const int64_t max_chunks = std::max<int64_t>(1, (max_len + kChunk - 1) / kChunk);
  const int64_t SS = s.key_dim * s.value_dim;
  scratch.reserve(size_t(num_seqs * s.num_value_heads * (max_chunks + kChunk) * SS) * sizeof(float));
  check(cudaMemsetAsync(d_q, 0, size_t(T * s.num_key_heads * s.key_dim) * sizeof(float), ctx.stream),
        "gdn_backward: zero d_q");
  check(cudaMemsetAsync(d_k, 0, size_t(T * s.num_key_heads * s.key_dim) * sizeof(float), ctx.stream),
        "gdn_backward: zero d_k");
  const size_t bytes = backward_shared_floats(s.key_dim, s.value_dim) * sizeof(float);
  set_shared(reinterpret_cast<const void*>(&backward_kernel), bytes, "gdn_backward: shared memory");
  dim3 grid(static_cast<unsigned>(num_seqs), static_cast<unsigned>(s.num_value_heads));
  backward_kernel<<<grid, kBackThreads, bytes, ctx.stream>>>(s, offsets, q, k, v, g, beta, d_out, d_q, d_k, d_v, d_g,
                                                             d_beta, scratch.as<float>(), max_chunks);
  check_launch("gdn_backward");
}

}  // namespace mlpt::ref::cuda
