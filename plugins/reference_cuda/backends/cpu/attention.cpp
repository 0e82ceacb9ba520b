// Causal GQA attention with a KV prefix, CPU reference (contract in attention.hpp, §2.5), as a
// flash-style kernel: a block of 32 query rows walks the kv range in tiles of 64 columns with an
// online softmax (running max and sum per row, the accumulator rescaled when the max grows), so no
// score row longer than a tile is ever stored and the working set stays in L1/L2 at any context.
//
// The backward recomputes each block's output and log-sum-exp in a first walk (the interface keeps
// neither), then per tile: P = exp(S − lse), dP = dO Vᵀ, dS = P ⊙ (dP − rowsum(dO ⊙ O)) · scale,
// dQ += dS K, dK += dSᵀ Q, dV += Pᵀ dO. The tile products go through detail::gemm_acc.
//
// One task per (sequence, kv head) covers the H/Hkv query heads reading that kv head, so tasks
// write disjoint memory (including d_k, d_v) and results do not depend on the thread count. K is
// transposed per task to [D][kv_len] (V too in the backward) so score tiles are products with
// contiguous rows.
//
// Runtime dispatch: the float kernels are compiled for AVX-512, AVX2+FMA and baseline x86-64 and
// run the path isa_path() names (the best the CPU has, or MLPT_CPU_PATH's), so a package runs on
// any x86-64, still uses the machine's vector width, and CI can run each path; exp is a
// branch-free polynomial the compiler vectorises. Results may differ by rounding between paths
// (FMA contraction), never between runs.
#include "backends/cpu/attention.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "backends/cpu/isa_path.hpp"
#include "backends/cpu/small_gemm.hpp"

// Threads only pay off above ~1 MFLOP of work; below that (decode steps, tests) run serially.
#if defined(_OPENMP)
#define MLPT_SEQOPS_PRAGMA(x) _Pragma(#x)
#define MLPT_SEQOPS_PARALLEL_FOR(worth_it) MLPT_SEQOPS_PRAGMA(omp parallel for schedule(dynamic, 1) if(worth_it))
#else
#define MLPT_SEQOPS_PARALLEL_FOR(worth_it)
#endif

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define MLPT_ATTENTION_ISA_BUILDS 1
#define MLPT_ATTENTION_AVX512 __attribute__((target("arch=skylake-avx512"), flatten))
#define MLPT_ATTENTION_AVX2 __attribute__((target("arch=haswell"), flatten))
#define MLPT_ATTENTION_BASELINE __attribute__((flatten))
#endif

namespace mlpt::ref::cpu {

namespace {

constexpr int64_t kBlockQ = 32;   // query rows per block (one head)
constexpr int64_t kBlockKv = 64;  // kv columns per tile

void check_attention_args(const char* op, const AttentionShape& s, const int64_t* q_offsets,
                          const int64_t* kv_offsets, size_t num_seqs,
                          std::initializer_list<std::pair<const char*, const void*>> required) {
  auto fail = [&](const std::string& what) { throw std::invalid_argument(std::string(op) + ": " + what); };
  if (s.num_heads <= 0 || s.num_kv_heads <= 0 || s.head_dim <= 0)
    fail("shape must be positive (H=" + std::to_string(s.num_heads) +
         ", Hkv=" + std::to_string(s.num_kv_heads) + ", D=" + std::to_string(s.head_dim) + ")");
  if (s.num_heads % s.num_kv_heads != 0)
    fail("num_kv_heads (" + std::to_string(s.num_kv_heads) + ") does not divide num_heads (" +
         std::to_string(s.num_heads) + ")");
  if (num_seqs == 0) return;
  if (!q_offsets || !kv_offsets) fail("q_offsets or kv_offsets is null");
  for (size_t i = 0; i < num_seqs; ++i) {
    const int64_t ql = q_offsets[i + 1] - q_offsets[i], kl = kv_offsets[i + 1] - kv_offsets[i];
    if (q_offsets[i] < 0 || kv_offsets[i] < 0 || ql < 0 || kl < 0)
      fail("offsets must be non-negative and non-decreasing (sequence " + std::to_string(i) + ")");
    if (ql > kl)
      fail("sequence " + std::to_string(i) + " has " + std::to_string(ql) + " queries but only " +
           std::to_string(kl) + " kv positions (queries are the last kv tokens)");
  }
  if (q_offsets[num_seqs] == q_offsets[0] && kv_offsets[num_seqs] == kv_offsets[0]) return;
  for (const auto& [name, ptr] : required)
    if (!ptr) fail(std::string(name) + " is null");
}

// Sum over sequences of q_len * kv_len: the work per head and head dim.
int64_t attention_work(const int64_t* q_offsets, const int64_t* kv_offsets, size_t num_seqs) {
  int64_t w = 0;
  for (size_t s = 0; s < num_seqs; ++s)
    w += (q_offsets[s + 1] - q_offsets[s]) * (kv_offsets[s + 1] - kv_offsets[s]);
  return w;
}

// Kt[c][j] = x_j[c] for the kv rows of one (sequence, kv head); rows are kv_stride apart.
template <class T>
void transpose_rows(const T* x, int64_t rows, int64_t kv_stride, int64_t D, std::vector<T>& xt) {
  xt.resize(static_cast<size_t>(D * rows));
  for (int64_t j = 0; j < rows; ++j)
    for (int64_t c = 0; c < D; ++c) xt[c * rows + j] = x[j * kv_stride + c];
}

// exp(x) for x <= 0 as a branch-free polynomial (Cephes' expf: range reduction by ln 2, degree-6
// polynomial, exponent by bit arithmetic; about 1 ulp), so the loops over a tile vectorise. Inputs
// below −87 give ~1e-38 instead of 0, immaterial next to the row's largest term, exp(0) = 1.
inline float exp_nonpositive(float x) {
  x = std::max(x, -87.0f);
  const float n = std::floor(x * 1.44269504088896341f + 0.5f);
  const float r = x - n * 0.693359375f + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}
inline double exp_nonpositive(double x) {
  return std::exp(x);
}

// p[j] = exp(p[j] − m) for j < n; returns the sum.
template <class T>
inline T exp_shifted(T* p, int64_t n, T m) {
  T z = 0;
  for (int64_t j = 0; j < n; ++j) z += (p[j] = exp_nonpositive(p[j] - m));
  return z;
}

// One block of query rows of one head against the kv range [0, first_last + rows), online softmax.
// Writes the normalised output rows (ldo apart) and, when lse is not NULL, each row's log-sum-exp.
// Row r sees columns j <= first_last + r.
template <class T>
inline void forward_block(const T* qb, int64_t ldq, int64_t rows, const T* Kt, int64_t kl, const T* vb,
                          int64_t ldkv, int64_t first_last, int64_t D, T scale, T* S, T* acc, T* o,
                          int64_t ldo, T* lse) {
  T m[kBlockQ], l[kBlockQ];
  std::fill(m, m + rows, -std::numeric_limits<T>::infinity());
  std::fill(l, l + rows, T(0));
  std::fill(acc, acc + rows * D, T(0));
  const int64_t ncol = first_last + rows;
  for (int64_t j0 = 0; j0 < ncol; j0 += kBlockKv) {
    const int64_t nc = std::min(kBlockKv, ncol - j0);
    std::fill(S, S + rows * kBlockKv, T(0));
    detail::gemm_acc<T>(rows, nc, D, scale, qb, ldq, Kt + j0, kl, S, kBlockKv);
    for (int64_t r = 0; r < rows; ++r) {
      T* p = S + r * kBlockKv;
      const int64_t valid = std::clamp<int64_t>(first_last + r + 1 - j0, 0, nc);
      if (valid == 0) {  // the whole tile is past this row's causal limit
        std::fill(p, p + nc, T(0));
        continue;
      }
      T mx = m[r];
      for (int64_t j = 0; j < valid; ++j) mx = std::max(mx, p[j]);
      const T correction = std::exp(m[r] - mx);  // 0 on the first tile (m = −inf)
      l[r] = l[r] * correction + exp_shifted(p, valid, mx);
      std::fill(p + valid, p + nc, T(0));
      m[r] = mx;
      if (correction != T(1))
        for (int64_t c = 0; c < D; ++c) acc[r * D + c] *= correction;
    }
    detail::gemm_acc<T>(rows, D, nc, 1, S, kBlockKv, vb + j0 * ldkv, ldkv, acc, D);
  }
  for (int64_t r = 0; r < rows; ++r) {
    const T inv = T(1) / l[r];
    for (int64_t c = 0; c < D; ++c) o[r * ldo + c] = acc[r * D + c] * inv;
    if (lse) lse[r] = m[r] + std::log(l[r]);
  }
}

struct Task {
  int64_t ql, kl, H, Hkv, D, q_row0;  // q_row0: the sequence's first query token
};

// Forward of one (sequence, kv head): every query head of the group, every block.
template <class T>
inline void forward_task(const Task& t, int64_t hkv, const T* q, const T* kb, const T* vb, T* out) {
  const int64_t r = t.H / t.Hkv, ldq = t.H * t.D, ldkv = t.Hkv * t.D;
  const T scale = T(1) / std::sqrt(T(t.D));
  std::vector<T> Kt, S(static_cast<size_t>(kBlockQ * kBlockKv)), acc(static_cast<size_t>(kBlockQ * t.D));
  transpose_rows(kb, t.kl, ldkv, t.D, Kt);
  for (int64_t h = hkv * r; h < (hkv + 1) * r; ++h)
    for (int64_t i0 = 0; i0 < t.ql; i0 += kBlockQ) {
      const int64_t rows = std::min(kBlockQ, t.ql - i0), first_last = t.kl - t.ql + i0;
      const int64_t row0 = (t.q_row0 + i0) * t.H + h;  // rows are H * D apart
      forward_block(q + row0 * t.D, ldq, rows, Kt.data(), t.kl, vb, ldkv, first_last, t.D, scale, S.data(),
                    acc.data(), out + row0 * t.D, ldq, static_cast<T*>(nullptr));
    }
}

// Backward of one (sequence, kv head); d_k and d_v rows of this task are zeroed here first.
template <class T>
inline void backward_task(const Task& t, int64_t hkv, const T* q, const T* kb, const T* vb, const T* d_out,
                          T* d_q, T* dkb, T* dvb) {
  const int64_t r = t.H / t.Hkv, ldq = t.H * t.D, ldkv = t.Hkv * t.D, D = t.D;
  const T scale = T(1) / std::sqrt(T(D));
  for (int64_t j = 0; j < t.kl; ++j) {
    std::fill(dkb + j * ldkv, dkb + j * ldkv + D, T(0));
    std::fill(dvb + j * ldkv, dvb + j * ldkv + D, T(0));
  }
  if (t.ql == 0) return;
  const size_t tile = static_cast<size_t>(kBlockQ * kBlockKv);
  std::vector<T> Kt, Vt, P(tile), dS(tile), Pt(tile), dSt(tile);
  std::vector<T> acc(static_cast<size_t>(kBlockQ * D)), O(static_cast<size_t>(kBlockQ * D));
  T lse[kBlockQ], rowdot[kBlockQ];
  transpose_rows(kb, t.kl, ldkv, D, Kt);
  transpose_rows(vb, t.kl, ldkv, D, Vt);
  for (int64_t h = hkv * r; h < (hkv + 1) * r; ++h)
    for (int64_t i0 = 0; i0 < t.ql; i0 += kBlockQ) {
      const int64_t rows = std::min(kBlockQ, t.ql - i0), first_last = t.kl - t.ql + i0,
                    ncol = first_last + rows;
      const int64_t row0 = (t.q_row0 + i0) * t.H + h;
      const T *qb = q + row0 * D, *dob = d_out + row0 * D;
      forward_block(qb, ldq, rows, Kt.data(), t.kl, vb, ldkv, first_last, D, scale, P.data(), acc.data(),
                    O.data(), D, lse);
      for (int64_t rr = 0; rr < rows; ++rr) {
        T dot = 0;
        for (int64_t c = 0; c < D; ++c) dot += dob[rr * ldq + c] * O[rr * D + c];
        rowdot[rr] = dot;
      }
      T* dqb = d_q + row0 * D;
      for (int64_t rr = 0; rr < rows; ++rr) std::fill(dqb + rr * ldq, dqb + rr * ldq + D, T(0));
      for (int64_t j0 = 0; j0 < ncol; j0 += kBlockKv) {
        const int64_t nc = std::min(kBlockKv, ncol - j0);
        std::fill(P.begin(), P.begin() + rows * kBlockKv, T(0));
        std::fill(dS.begin(), dS.begin() + rows * kBlockKv, T(0));
        detail::gemm_acc<T>(rows, nc, D, scale, qb, ldq, Kt.data() + j0, t.kl, P.data(), kBlockKv);
        detail::gemm_acc<T>(rows, nc, D, 1, dob, ldq, Vt.data() + j0, t.kl, dS.data(), kBlockKv);  // dP
        for (int64_t rr = 0; rr < rows; ++rr) {
          T *p = P.data() + rr * kBlockKv, *ds = dS.data() + rr * kBlockKv;
          const int64_t valid = std::clamp<int64_t>(first_last + rr + 1 - j0, 0, nc);
          exp_shifted(p, valid, lse[rr]);
          for (int64_t j = 0; j < valid; ++j) ds[j] = p[j] * (ds[j] - rowdot[rr]) * scale;
          std::fill(p + valid, p + nc, T(0));
          std::fill(ds + valid, ds + nc, T(0));
        }
        detail::gemm_acc<T>(rows, D, nc, 1, dS.data(), kBlockKv, kb + j0 * ldkv, ldkv, dqb, ldq);
        for (int64_t j = 0; j < nc; ++j)
          for (int64_t rr = 0; rr < rows; ++rr) {
            Pt[j * kBlockQ + rr] = P[rr * kBlockKv + j];
            dSt[j * kBlockQ + rr] = dS[rr * kBlockKv + j];
          }
        detail::gemm_acc<T>(nc, D, rows, 1, dSt.data(), kBlockQ, qb, ldq, dkb + j0 * ldkv, ldkv);
        detail::gemm_acc<T>(nc, D, rows, 1, Pt.data(), kBlockQ, dob, ldq, dvb + j0 * ldkv, ldkv);
      }
    }
}

// The float kernels, one build per instruction set, run by isa_path(); double (the oracle's
// precision) is generic.
#if defined(MLPT_ATTENTION_ISA_BUILDS)
#define MLPT_ATTENTION_BUILD(attr, suffix)                                                      \
  attr void forward_task_##suffix(const Task& t, int64_t hkv, const float* q, const float* kb,  \
                                  const float* vb, float* out) {                                \
    forward_task<float>(t, hkv, q, kb, vb, out);                                                \
  }                                                                                             \
  attr void backward_task_##suffix(const Task& t, int64_t hkv, const float* q, const float* kb, \
                                   const float* vb, const float* d_out, float* d_q, float* dkb, \
                                   float* dvb) {                                                \
    backward_task<float>(t, hkv, q, kb, vb, d_out, d_q, dkb, dvb);                              \
  }
MLPT_ATTENTION_BUILD(MLPT_ATTENTION_AVX512, avx512)
MLPT_ATTENTION_BUILD(MLPT_ATTENTION_AVX2, avx2)
MLPT_ATTENTION_BUILD(MLPT_ATTENTION_BASELINE, baseline)
#undef MLPT_ATTENTION_BUILD

void forward_task_f32(const Task& t, int64_t hkv, const float* q, const float* kb, const float* vb,
                      float* out) {
  const IsaPath path = isa_path();  // chosen once per process
  if (path == IsaPath::avx512) return forward_task_avx512(t, hkv, q, kb, vb, out);
  if (path == IsaPath::avx2) return forward_task_avx2(t, hkv, q, kb, vb, out);
  forward_task_baseline(t, hkv, q, kb, vb, out);
}
void backward_task_f32(const Task& t, int64_t hkv, const float* q, const float* kb, const float* vb,
                       const float* d_out, float* d_q, float* dkb, float* dvb) {
  const IsaPath path = isa_path();  // chosen once per process
  if (path == IsaPath::avx512) return backward_task_avx512(t, hkv, q, kb, vb, d_out, d_q, dkb, dvb);
  if (path == IsaPath::avx2) return backward_task_avx2(t, hkv, q, kb, vb, d_out, d_q, dkb, dvb);
  backward_task_baseline(t, hkv, q, kb, vb, d_out, d_q, dkb, dvb);
}
#else
void forward_task_f32(const Task& t, int64_t hkv, const float* q, const float* kb, const float* vb,
                      float* out) {
  forward_task<float>(t, hkv, q, kb, vb, out);
}
void backward_task_f32(const Task& t, int64_t hkv, const float* q, const float* kb, const float* vb,
                       const float* d_out, float* d_q, float* dkb, float* dvb) {
  backward_task<float>(t, hkv, q, kb, vb, d_out, d_q, dkb, dvb);
}
#endif
void forward_task_any(const Task& t, int64_t hkv, const float* q, const float* kb, const float* vb,
                      float* out) {
  forward_task_f32(t, hkv, q, kb, vb, out);
}
void forward_task_any(const Task& t, int64_t hkv, const double* q, const double* kb, const double* vb,
                      double* out) {
  forward_task<double>(t, hkv, q, kb, vb, out);
}
void backward_task_any(const Task& t, int64_t hkv, const float* q, const float* kb, const float* vb,
                       const float* d_out, float* d_q, float* dkb, float* dvb) {
  backward_task_f32(t, hkv, q, kb, vb, d_out, d_q, dkb, dvb);
}
void backward_task_any(const Task& t, int64_t hkv, const double* q, const double* kb, const double* vb,
                       const double* d_out, double* d_q, double* dkb, double* dvb) {
  backward_task<double>(t, hkv, q, kb, vb, d_out, d_q, dkb, dvb);
}

}  // namespace

template <class T>
void attention_forward(const AttentionShape& shape, const int64_t* q_offsets, const int64_t* kv_offsets,
                       size_t num_seqs, const T* q, const T* k, const T* v, T* out) {
  check_attention_args("attention_forward", shape, q_offsets, kv_offsets, num_seqs,
                       {{"q", q}, {"k", k}, {"v", v}, {"out", out}});
  const int64_t H = shape.num_heads, Hkv = shape.num_kv_heads, D = shape.head_dim;
  const int64_t tasks = static_cast<int64_t>(num_seqs) * Hkv;
  MLPT_SEQOPS_PARALLEL_FOR(tasks > 1 && attention_work(q_offsets, kv_offsets, num_seqs) * H * D >= (1 << 20))
  for (int64_t task = 0; task < tasks; ++task) {
    const int64_t s = task / Hkv, hkv = task % Hkv;
    const Task t{q_offsets[s + 1] - q_offsets[s], kv_offsets[s + 1] - kv_offsets[s], H, Hkv, D, q_offsets[s]};
    if (t.ql == 0) continue;
    const int64_t kv0 = (kv_offsets[s] * Hkv + hkv) * D;
    forward_task_any(t, hkv, q, k + kv0, v + kv0, out);
  }
}

template <class T>
void attention_backward(const AttentionShape& shape, const int64_t* q_offsets, const int64_t* kv_offsets,
                        size_t num_seqs, const T* q, const T* k, const T* v, const T* d_out, T* d_q, T* d_k,
                        T* d_v) {
  check_attention_args(
      "attention_backward", shape, q_offsets, kv_offsets, num_seqs,
      {{"q", q}, {"k", k}, {"v", v}, {"d_out", d_out}, {"d_q", d_q}, {"d_k", d_k}, {"d_v", d_v}});
  const int64_t H = shape.num_heads, Hkv = shape.num_kv_heads, D = shape.head_dim;
  const int64_t tasks = static_cast<int64_t>(num_seqs) * Hkv;
  MLPT_SEQOPS_PARALLEL_FOR(tasks > 1 && attention_work(q_offsets, kv_offsets, num_seqs) * H * D >= (1 << 20))
  for (int64_t task = 0; task < tasks; ++task) {
    const int64_t s = task / Hkv, hkv = task % Hkv;
    const Task t{q_offsets[s + 1] - q_offsets[s], kv_offsets[s + 1] - kv_offsets[s], H, Hkv, D, q_offsets[s]};
    const int64_t kv0 = (kv_offsets[s] * Hkv + hkv) * D;
    backward_task_any(t, hkv, q, k + kv0, v + kv0, d_out, d_q, d_k + kv0, d_v + kv0);
  }
}

#define MLPT_ATTENTION_INSTANTIATE(T)                                                                \
  template void attention_forward<T>(const AttentionShape&, const int64_t*, const int64_t*, size_t,  \
                                     const T*, const T*, const T*, T*);                              \
  template void attention_backward<T>(const AttentionShape&, const int64_t*, const int64_t*, size_t, \
                                      const T*, const T*, const T*, const T*, T*, T*, T*);
MLPT_ATTENTION_INSTANTIATE(float)
MLPT_ATTENTION_INSTANTIATE(double)
#undef MLPT_ATTENTION_INSTANTIATE

}  // namespace mlpt::ref::cpu
