// Causal GQA attention with a KV prefix, CPU reference (contract in attention.hpp, §2.5).
// Softmax rows are formed whole for a block of 32 query rows: scores, max subtraction, exp,
// normalise (two passes per row). The backward recomputes the rows (as flash attention's backward
// does) instead of storing P. The block products go through detail::gemm_acc.
//
// One task per (sequence, kv head) covers the H/Hkv query heads reading that kv head, so tasks
// write disjoint memory (including d_k, d_v) and results do not depend on the thread count.
// K (and V in the backward) are transposed per task to [D][kv_len], so score rows are products
// with contiguous rows.
#include "backends/cpu/attention.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "backends/cpu/small_gemm.hpp"

// Threads only pay off above ~1 MFLOP of work; below that (decode steps, tests) run serially.
#if defined(_OPENMP)
#define MLPT_SEQOPS_PRAGMA(x) _Pragma(#x)
#define MLPT_SEQOPS_PARALLEL_FOR(worth_it) MLPT_SEQOPS_PRAGMA(omp parallel for schedule(dynamic, 1) if(worth_it))
#else
#define MLPT_SEQOPS_PARALLEL_FOR(worth_it)
#endif

namespace mlpt::ref::cpu {

namespace {

constexpr int64_t kBlock = 32;  // query rows per block (one head)

void check_attention_args(const char* op, const AttentionShape& s, const int64_t* q_offsets,
                          const int64_t* kv_offsets, size_t num_seqs,
                          std::initializer_list<std::pair<const char*, const void*>> required) {
  auto fail = [&](const std::string& what) { throw std::invalid_argument(std::string(op) + ": " + what); };
  if (s.num_heads <= 0 || s.num_kv_heads <= 0 || s.head_dim <= 0)
    fail("shape must be positive (H=" + std::to_string(s.num_heads) + ", Hkv=" +
         std::to_string(s.num_kv_heads) + ", D=" + std::to_string(s.head_dim) + ")");
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
      fail("sequence " + std::to_string(i) + " has " + std::to_string(ql) +
           " queries but only " + std::to_string(kl) + " kv positions (queries are the last kv tokens)");
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

// Scores of a block of query rows: Sc[r][j] = softmax_j(scale * q_r . k_j) over j <= last_r =
// first_last + r, and 0 for last_r < j < ncol. Sc has ld columns; Kt is [D][ld].
template <class T>
void softmax_block(const T* qb, int64_t ldq, int64_t rows, const T* Kt, int64_t ld, int64_t first_last, int64_t D,
                   T scale, T* Sc) {
  const int64_t ncol = first_last + rows;
  for (int64_t r = 0; r < rows; ++r) std::fill(Sc + r * ld, Sc + r * ld + ncol, T(0));
  detail::gemm_acc<T>(rows, ncol, D, scale, qb, ldq, Kt, ld, Sc, ld);
  for (int64_t r = 0; r < rows; ++r) {
    T* p = Sc + r * ld;
    const int64_t n = first_last + r + 1;
    T mx = -std::numeric_limits<T>::infinity();
    for (int64_t j = 0; j < n; ++j) mx = std::max(mx, p[j]);
    T z = 0;
    for (int64_t j = 0; j < n; ++j) z += (p[j] = std::exp(p[j] - mx));
    const T inv = T(1) / z;
    for (int64_t j = 0; j < n; ++j) p[j] *= inv;
    std::fill(p + n, p + ncol, T(0));  // causal mask
  }
}

}  // namespace

// Per task, per query head, blocks of kBlock query rows: S = scale Q Kᵀ over the block's kv range
// (columns past a row's causal limit are masked to probability 0), row softmax, O = P V.
template <class T>
void attention_forward(const AttentionShape& shape, const int64_t* q_offsets,
                       const int64_t* kv_offsets, size_t num_seqs, const T* q, const T* k,
                       const T* v, T* out) {
  check_attention_args("attention_forward", shape, q_offsets, kv_offsets, num_seqs,
                       {{"q", q}, {"k", k}, {"v", v}, {"out", out}});
  const int64_t H = shape.num_heads, Hkv = shape.num_kv_heads, D = shape.head_dim, r = H / Hkv;
  const T scale = T(1) / std::sqrt(T(D));
  const int64_t tasks = static_cast<int64_t>(num_seqs) * Hkv;
  MLPT_SEQOPS_PARALLEL_FOR(tasks > 1 && attention_work(q_offsets, kv_offsets, num_seqs) * H * D >= (1 << 20))
  for (int64_t task = 0; task < tasks; ++task) {
    const int64_t s = task / Hkv, hkv = task % Hkv;
    const int64_t ql = q_offsets[s + 1] - q_offsets[s], kl = kv_offsets[s + 1] - kv_offsets[s];
    if (ql == 0) continue;
    const T* vb = v + (kv_offsets[s] * Hkv + hkv) * D;
    std::vector<T> Kt, Sc(static_cast<size_t>(kBlock * kl));
    transpose_rows(k + (kv_offsets[s] * Hkv + hkv) * D, kl, Hkv * D, D, Kt);
    for (int64_t h = hkv * r; h < (hkv + 1) * r; ++h)
      for (int64_t i0 = 0; i0 < ql; i0 += kBlock) {
        const int64_t rows = std::min(kBlock, ql - i0), first_last = kl - ql + i0;
        const int64_t row0 = (q_offsets[s] + i0) * H + h;  // rows are H * D apart
        softmax_block(q + row0 * D, H * D, rows, Kt.data(), kl, first_last, D, scale, Sc.data());
        T* o = out + row0 * D;
        for (int64_t rr = 0; rr < rows; ++rr) std::fill(o + rr * H * D, o + rr * H * D + D, T(0));
        detail::gemm_acc<T>(rows, D, first_last + rows, 1, Sc.data(), kl, vb, Hkv * D, o, H * D);
      }
  }
}

// Per block: recompute P; dP = dO Vᵀ; dS = P ⊙ (dP - rowsum(P ⊙ dP)) · scale; dQ = dS K;
// dK += dSᵀ Q; dV += Pᵀ dO (the transposes of P and dS are formed explicitly).
template <class T>
void attention_backward(const AttentionShape& shape, const int64_t* q_offsets,
                        const int64_t* kv_offsets, size_t num_seqs, const T* q, const T* k,
                        const T* v, const T* d_out, T* d_q, T* d_k, T* d_v) {
  check_attention_args("attention_backward", shape, q_offsets, kv_offsets, num_seqs,
                       {{"q", q}, {"k", k}, {"v", v}, {"d_out", d_out}, {"d_q", d_q}, {"d_k", d_k},
                        {"d_v", d_v}});
  const int64_t H = shape.num_heads, Hkv = shape.num_kv_heads, D = shape.head_dim, r = H / Hkv;
  const int64_t ldq = H * D, ldkv = Hkv * D;
  const T scale = T(1) / std::sqrt(T(D));
  const int64_t tasks = static_cast<int64_t>(num_seqs) * Hkv;
  MLPT_SEQOPS_PARALLEL_FOR(tasks > 1 && attention_work(q_offsets, kv_offsets, num_seqs) * H * D >= (1 << 20))
  for (int64_t task = 0; task < tasks; ++task) {
    const int64_t s = task / Hkv, hkv = task % Hkv;
    const int64_t ql = q_offsets[s + 1] - q_offsets[s], kl = kv_offsets[s + 1] - kv_offsets[s];
    const int64_t kv0 = kv_offsets[s] * Hkv + hkv;  // row index of kv position 0, step Hkv
    T *dkb = d_k + kv0 * D, *dvb = d_v + kv0 * D;
    for (int64_t j = 0; j < kl; ++j) {
      std::fill(dkb + j * ldkv, dkb + j * ldkv + D, T(0));
      std::fill(dvb + j * ldkv, dvb + j * ldkv + D, T(0));
    }
    if (ql == 0) continue;
    const T* kb = k + kv0 * D;
    const size_t block = static_cast<size_t>(kBlock * kl);
    std::vector<T> Kt, Vt, P(block), dS(block), Pt(block), dSt(block);
    transpose_rows(kb, kl, ldkv, D, Kt);
    transpose_rows(v + kv0 * D, kl, ldkv, D, Vt);
    for (int64_t h = hkv * r; h < (hkv + 1) * r; ++h)
      for (int64_t i0 = 0; i0 < ql; i0 += kBlock) {
        const int64_t rows = std::min(kBlock, ql - i0), first_last = kl - ql + i0, ncol = first_last + rows;
        const int64_t row0 = (q_offsets[s] + i0) * H + h;
        const T *qb = q + row0 * D, *dob = d_out + row0 * D;
        softmax_block(qb, ldq, rows, Kt.data(), kl, first_last, D, scale, P.data());
        for (int64_t rr = 0; rr < rows; ++rr) std::fill(dS.begin() + rr * kl, dS.begin() + rr * kl + ncol, T(0));
        detail::gemm_acc<T>(rows, ncol, D, 1, dob, ldq, Vt.data(), kl, dS.data(), kl);  // dP
        for (int64_t rr = 0; rr < rows; ++rr) {
          const T* p = P.data() + rr * kl;
          T* ds = dS.data() + rr * kl;
          T rowdot = 0;
          for (int64_t j = 0; j < ncol; ++j) rowdot += p[j] * ds[j];
          for (int64_t j = 0; j < ncol; ++j) ds[j] = p[j] * (ds[j] - rowdot) * scale;
        }
        T* dqb = d_q + row0 * D;
        for (int64_t rr = 0; rr < rows; ++rr) std::fill(dqb + rr * ldq, dqb + rr * ldq + D, T(0));
        detail::gemm_acc<T>(rows, D, ncol, 1, dS.data(), kl, kb, ldkv, dqb, ldq);
        for (int64_t j = 0; j < ncol; ++j)
          for (int64_t rr = 0; rr < rows; ++rr) {
            Pt[j * kBlock + rr] = P[rr * kl + j];
            dSt[j * kBlock + rr] = dS[rr * kl + j];
          }
        detail::gemm_acc<T>(ncol, D, rows, 1, dSt.data(), kBlock, qb, ldq, dkb, ldkv);
        detail::gemm_acc<T>(ncol, D, rows, 1, Pt.data(), kBlock, dob, ldq, dvb, ldkv);
      }
  }
}

#define MLPT_ATTENTION_INSTANTIATE(T)                                                              \
  template void attention_forward<T>(const AttentionShape&, const int64_t*, const int64_t*, size_t, \
                                     const T*, const T*, const T*, T*);                             \
  template void attention_backward<T>(const AttentionShape&, const int64_t*, const int64_t*,        \
                                      size_t, const T*, const T*, const T*, const T*, T*, T*, T*);
MLPT_ATTENTION_INSTANTIATE(float)
MLPT_ATTENTION_INSTANTIATE(double)
#undef MLPT_ATTENTION_INSTANTIATE

}  // namespace mlpt::ref::cpu
