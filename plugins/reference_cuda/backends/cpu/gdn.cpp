// Gated DeltaNet recurrence: token-by-token form, chunked form (chunk 64) and the exact adjoint
// (docs/qwen35-architecture.md §2.4.6, §2.4.7, §3). State layout S[a][j], a < dk (key), j < dv (value),
// so every inner loop runs over a contiguous value row and vectorises without reassociation.
//
// Work is split into independent tasks, one per (sequence, key head): a task owns the outputs of
// the r = Hv/Hk value heads that read its key head (and, in the backward, the key head's d_q/d_k),
// so no two tasks write the same memory and results do not depend on the thread count.
#include "backends/cpu/gdn.hpp"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

// Threads only pay off above ~1 MFLOP of work; below that (decode steps, tests) run serially.
#if defined(_OPENMP)
#define MLPT_SEQOPS_PRAGMA(x) _Pragma(#x)
#define MLPT_SEQOPS_PARALLEL_FOR(worth_it) MLPT_SEQOPS_PRAGMA(omp parallel for schedule(dynamic, 1) if(worth_it))
#else
#define MLPT_SEQOPS_PARALLEL_FOR(worth_it)
#endif

namespace mlpt::ref::cpu {

namespace {

constexpr int64_t kChunk = 64;  // §2.4.7

void check_gdn_args(const char* op, const GdnShape& s, const int64_t* offsets, size_t num_seqs,
                    std::initializer_list<std::pair<const char*, const void*>> required) {
  auto fail = [&](const std::string& what) {
    throw std::invalid_argument(std::string(op) + ": " + what);
  };
  if (s.num_key_heads <= 0 || s.num_value_heads <= 0 || s.key_dim <= 0 || s.value_dim <= 0)
    fail("shape must be positive (Hk=" + std::to_string(s.num_key_heads) +
         ", Hv=" + std::to_string(s.num_value_heads) + ", dk=" + std::to_string(s.key_dim) +
         ", dv=" + std::to_string(s.value_dim) + ")");
  if (s.num_value_heads % s.num_key_heads != 0)
    fail("num_value_heads (" + std::to_string(s.num_value_heads) +
         ") is not a multiple of num_key_heads (" + std::to_string(s.num_key_heads) + ")");
  if (num_seqs == 0) return;
  if (!offsets) fail("offsets is null");
  for (size_t i = 0; i < num_seqs; ++i)
    if (offsets[i] < 0 || offsets[i + 1] < offsets[i])
      fail("offsets must be non-negative and non-decreasing (offsets[" + std::to_string(i) +
           "]=" + std::to_string(offsets[i]) + ", offsets[" + std::to_string(i + 1) +
           "]=" + std::to_string(offsets[i + 1]) + ")");
  if (offsets[num_seqs] == offsets[0]) return;  // no tokens: token tensors may be null
  for (const auto& [name, ptr] : required)
    if (!ptr) fail(std::string(name) + " is null");
}

// Per-task view of one (sequence, key head) of the packed tensors.
template <class T>
struct GdnTask {
  const GdnShape& s;
  int64_t start, len, hk, r;  // tokens [start, start+len), key head hk, r value heads per key head
  const T* q(int64_t t) const { return qp + ((start + t) * s.num_key_heads + hk) * s.key_dim; }
  const T* k(int64_t t) const { return kp + ((start + t) * s.num_key_heads + hk) * s.key_dim; }
  int64_t vh(int64_t t, int64_t h) const { return (start + t) * s.num_value_heads + h; }  // [T,Hv] index
  const T *qp, *kp;
};

// One recurrence step on a state S [dk][dv] (§2.4.6), in place. Writes w = S̃ᵀk, u and, when o is
// not null, o = S_tᵀ q. Two passes over S: w from S_{t-1} (scaled by alpha afterwards), then the
// decay + rank-1 update fused with the output.
template <class T>
inline void gdn_step(int64_t dk, int64_t dv, T* S, const T* q, const T* k, const T* v, T g, T beta,
                     T* w, T* u, T* o) {
  const T alpha = std::exp(g);
  std::fill(w, w + dv, T(0));
  for (int64_t a = 0; a < dk; ++a) {
    const T ka = k[a];
    const T* Sa = S + a * dv;
    for (int64_t j = 0; j < dv; ++j) w[j] += ka * Sa[j];
  }
  for (int64_t j = 0; j < dv; ++j) {
    w[j] *= alpha;
    u[j] = beta * (v[j] - w[j]);
  }
  if (o) std::fill(o, o + dv, T(0));
  for (int64_t a = 0; a < dk; ++a) {
    const T ka = k[a];
    T* Sa = S + a * dv;
    for (int64_t j = 0; j < dv; ++j) Sa[j] = alpha * Sa[j] + ka * u[j];
    if (o) {
      const T qa = q[a];
      for (int64_t j = 0; j < dv; ++j) o[j] += qa * Sa[j];
    }
  }
}

// C = alpha op(A) op(B) + beta C, row-major, through OpenBLAS.
template <class T>
void blas_gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, T alpha, const T* A, int64_t lda,
               const T* B, int64_t ldb, T beta, T* C, int64_t ldc) {
  const auto opa = ta ? CblasTrans : CblasNoTrans, opb = tb ? CblasTrans : CblasNoTrans;
  if constexpr (std::is_same_v<T, float>)
    cblas_sgemm(CblasRowMajor, opa, opb, int(M), int(N), int(K), alpha, A, int(lda), B, int(ldb), beta, C,
                int(ldc));
  else
    cblas_dgemm(CblasRowMajor, opa, opb, int(M), int(N), int(K), alpha, A, int(lda), B, int(ldb), beta, C,
                int(ldc));
}

// The in-chunk decay of n tokens whose log decays are g[i * stride]: gam = cumulative sum, Gam =
// e^gam, and E_ij = e^{gam_i - gam_j} for j <= i (0 above; row stride ld). Only gam_i <= 0 and
// differences are exponentiated, never -gam, unless every |gam_i| is small enough that 1 / Gam_j
// is finite with margin: then E_ij = Gam_i / Gam_j, one multiply per element instead of an exp.
template <class T>
void decay_matrix(int64_t n, int64_t ld, const T* g, int64_t stride, T* gam, T* Gam, T* inv, T* E) {
  T acc = 0, extreme = 0;
  for (int64_t i = 0; i < n; ++i) {
    gam[i] = acc += g[i * stride];
    Gam[i] = std::exp(gam[i]);
    extreme = std::max(extreme, std::abs(gam[i]));
  }
  // e^40 ~ 2e17 (float's range is 3e38; double's limit is set by its own 1e308).
  const T safe = std::is_same_v<T, float> ? T(40) : T(300);
  if (extreme < safe) {
    for (int64_t j = 0; j < n; ++j) inv[j] = T(1) / Gam[j];
    for (int64_t i = 0; i < n; ++i) {
      T* Ei = E + i * ld;
      for (int64_t j = 0; j <= i; ++j) Ei[j] = Gam[i] * inv[j];
      std::fill(Ei + i + 1, Ei + n, T(0));
    }
    return;
  }
  for (int64_t i = 0; i < n; ++i) {
    T* Ei = E + i * ld;
    for (int64_t j = 0; j <= i; ++j) Ei[j] = std::exp(gam[i] - gam[j]);
    std::fill(Ei + i + 1, Ei + n, T(0));
  }
}

// X = (I + A)^-1 for A strictly lower triangular (n x n, row stride ld; its diagonal and upper
// part are not read), by forward substitution row by row: X_i = e_i - sum_{j<i} A_ij X_j. X is
// unit lower triangular, zero above the diagonal.
template <class T>
void unit_lower_inverse(int64_t n, int64_t ld, const T* A, T* X) {
  for (int64_t i = 0; i < n; ++i) {
    T* Xi = X + i * ld;
    std::fill(Xi, Xi + n, T(0));
    Xi[i] = 1;
    const T* Ai = A + i * ld;
    for (int64_t j = 0; j < i; ++j) {
      const T a = Ai[j];
      const T* Xj = X + j * ld;
      for (int64_t c = 0; c <= j; ++c) Xi[c] -= a * Xj[c];
    }
  }
}

}  // namespace

template <class T>
void gdn_recurrent_forward(const GdnShape& shape, const int64_t* offsets, size_t num_seqs,
                           const T* q, const T* k, const T* v, const T* g, const T* beta,
                           const T* initial_state, T* out, T* final_state) {
  check_gdn_args("gdn_recurrent_forward", shape, offsets, num_seqs,
                 {{"q", q}, {"k", k}, {"v", v}, {"g", g}, {"beta", beta}, {"out", out}});
  const int64_t Hk = shape.num_key_heads, Hv = shape.num_value_heads, dk = shape.key_dim,
                dv = shape.value_dim, r = Hv / Hk, SS = dk * dv;
  const int64_t tasks = static_cast<int64_t>(num_seqs) * Hk;
  MLPT_SEQOPS_PARALLEL_FOR(tasks > 1 && (offsets[num_seqs] - offsets[0]) * Hv * SS >= (1 << 20))
  for (int64_t task = 0; task < tasks; ++task) {
    const int64_t s = task / Hk, hk = task % Hk;
    GdnTask<T> tk{shape, offsets[s], offsets[s + 1] - offsets[s], hk, r, q, k};
    std::vector<T> S(static_cast<size_t>(SS)), w(static_cast<size_t>(dv)), u(static_cast<size_t>(dv));
    for (int64_t h = hk * r; h < (hk + 1) * r; ++h) {
      const int64_t sh = s * Hv + h;  // [num_seqs, Hv] state index
      if (initial_state)
        std::copy(initial_state + sh * SS, initial_state + (sh + 1) * SS, S.begin());
      else
        std::fill(S.begin(), S.end(), T(0));
      for (int64_t t = 0; t < tk.len; ++t) {
        const int64_t i = tk.vh(t, h);
        gdn_step(dk, dv, S.data(), tk.q(t), tk.k(t), v + i * dv, g[i], beta[i], w.data(), u.data(),
                 out + i * dv);
      }
      if (final_state) std::copy(S.begin(), S.end(), final_state + sh * SS);
    }
  }
}

// Chunked form (the WY/UT form), per chunk of n <= 64 tokens (the last chunk is not padded:
// zero-padded rows have beta = k = v = g = 0 and contribute exact zeros, so processing only the n
// real rows is the same computation as padding to 64). With gamma the in-chunk cumulative log
// decay, Gamma = e^gamma, E_ij = e^{gamma_i - gamma_j} (j <= i), A = strictly lower part of
// diag(beta) K Kᵀ ⊙ E and T = (I + A)^-1:
//   U = T diag(beta) V,  W = T diag(beta Gamma) K,  V' = U - W S        (S: the state entering)
//   O = diag(Gamma) Q S + (Q Kᵀ ⊙ E) V',  S_next = Gamma_n S + (diag(E_n·) K)ᵀ V'.
// Every product runs as an OpenBLAS matrix product; K Kᵀ and Q Kᵀ are shared by the r value heads
// of a key head. T (n³/6 multiply-adds) is formed by forward substitution. Work per token and value
// head is about twice the recurrence's, done as matrix products at several times its FLOP rate.
template <class T>
void gdn_chunked_forward(const GdnShape& shape, const int64_t* offsets, size_t num_seqs,
                         const T* q, const T* k, const T* v, const T* g, const T* beta,
                         const T* initial_state, T* out, T* final_state) {
  check_gdn_args("gdn_chunked_forward", shape, offsets, num_seqs,
                 {{"q", q}, {"k", k}, {"v", v}, {"g", g}, {"beta", beta}, {"out", out}});
  const int64_t Hk = shape.num_key_heads, Hv = shape.num_value_heads, dk = shape.key_dim,
                dv = shape.value_dim, r = Hv / Hk, SS = dk * dv, C = kChunk;
  const int64_t ldk = Hk * dk, ldo = Hv * dv;  // token strides of q/k rows and of v/out rows
  const int64_t tasks = static_cast<int64_t>(num_seqs) * Hk;
  MLPT_SEQOPS_PARALLEL_FOR(tasks > 1 && (offsets[num_seqs] - offsets[0]) * Hv * SS >= (1 << 20))
  for (int64_t task = 0; task < tasks; ++task) {
    const int64_t s = task / Hk, hk = task % Hk;
    GdnTask<T> tk{shape, offsets[s], offsets[s + 1] - offsets[s], hk, r, q, k};
    auto buf = [](int64_t n) { return std::vector<T>(static_cast<size_t>(n)); };
    std::vector<T> S = buf(r * SS);  // the r value-head states of this key head
    std::vector<T> KK = buf(C * C), QK = buf(C * C), E = buf(C * C), A = buf(C * C), P = buf(C * C);
    std::vector<T> Tb = buf(C * C), Tg = buf(C * C), gam = buf(C), Gam = buf(C), inv = buf(C);
    std::vector<T> U = buf(C * dv), W = buf(C * dk), Kd = buf(C * dk);
    for (int64_t hr = 0; hr < r; ++hr) {
      const int64_t sh = s * Hv + hk * r + hr;
      if (initial_state)
        std::copy(initial_state + sh * SS, initial_state + (sh + 1) * SS, S.begin() + hr * SS);
      else
        std::fill(S.begin() + hr * SS, S.begin() + (hr + 1) * SS, T(0));
    }
    for (int64_t c0 = 0; c0 < tk.len; c0 += C) {
      const int64_t n = std::min(C, tk.len - c0);
      const T *Kc = tk.k(c0), *Qc = tk.q(c0);
      // Key-head products: KK = K Kᵀ, QK = Q Kᵀ (only their lower triangles are read).
      blas_gemm<T>(false, true, n, n, dk, 1, Kc, ldk, Kc, ldk, 0, KK.data(), C);
      blas_gemm<T>(false, true, n, n, dk, 1, Qc, ldk, Kc, ldk, 0, QK.data(), C);
      for (int64_t hr = 0; hr < r; ++hr) {
        const int64_t h = hk * r + hr;
        T* Sh = S.data() + hr * SS;
        const T* bt = beta + tk.vh(c0, h);  // beta and g of token i at [i * Hv]
        const T* gt = g + tk.vh(c0, h);
        decay_matrix(n, C, gt, Hv, gam.data(), Gam.data(), inv.data(), E.data());
        // A (strictly lower) and P = Q Kᵀ ⊙ E (lower, diagonal included).
        for (int64_t i = 0; i < n; ++i) {
          const T bi = bt[i * Hv];
          T *Ai = A.data() + i * C, *Pi = P.data() + i * C;
          const T *Ei = E.data() + i * C, *KKi = KK.data() + i * C, *QKi = QK.data() + i * C;
          for (int64_t j = 0; j < i; ++j) Ai[j] = bi * KKi[j] * Ei[j];
          for (int64_t j = 0; j <= i; ++j) Pi[j] = QKi[j] * Ei[j];
          std::fill(Pi + i + 1, Pi + n, T(0));
        }
        // Tb = T diag(beta), Tg = T diag(beta Gamma): the solve's right-hand scalings folded into T.
        unit_lower_inverse(n, C, A.data(), Tb.data());
        for (int64_t i = 0; i < n; ++i) {
          T *Tbi = Tb.data() + i * C, *Tgi = Tg.data() + i * C;
          for (int64_t j = 0; j <= i; ++j) {
            Tbi[j] *= bt[j * Hv];
            Tgi[j] = Tbi[j] * Gam[j];
          }
          std::fill(Tgi + i + 1, Tgi + n, T(0));
        }
        // U = Tb V, W = Tg K, V' = U - W S (in U).
        blas_gemm<T>(false, false, n, dv, n, 1, Tb.data(), C, v + tk.vh(c0, h) * dv, ldo, 0, U.data(), dv);
        blas_gemm<T>(false, false, n, dk, n, 1, Tg.data(), C, Kc, ldk, 0, W.data(), dk);
        blas_gemm<T>(false, false, n, dv, dk, -1, W.data(), dk, Sh, dv, 1, U.data(), dv);
        // O = diag(Gamma) Q S + P V'.
        T* o0 = out + tk.vh(c0, h) * dv;
        blas_gemm<T>(false, false, n, dv, dk, 1, Qc, ldk, Sh, dv, 0, o0, ldo);
        for (int64_t i = 0; i < n; ++i)
          for (int64_t j = 0; j < dv; ++j) o0[i * ldo + j] *= Gam[i];
        blas_gemm<T>(false, false, n, dv, n, 1, P.data(), C, U.data(), dv, 1, o0, ldo);
        // S_next = Gamma_n S + Kdᵀ V', Kd = diag(E_{n-1, ·}) K.
        const T* En = E.data() + (n - 1) * C;
        for (int64_t j = 0; j < n; ++j)
          for (int64_t a = 0; a < dk; ++a) Kd[j * dk + a] = En[j] * Kc[j * ldk + a];
        blas_gemm<T>(true, false, dk, dv, n, 1, Kd.data(), dk, U.data(), dv, Gam[n - 1], Sh, dv);
      }
    }
    if (final_state)
      for (int64_t hr = 0; hr < r; ++hr) {
        const int64_t sh = s * Hv + hk * r + hr;
        std::copy(S.begin() + hr * SS, S.begin() + (hr + 1) * SS, final_state + sh * SS);
      }
  }
}

// The adjoint of the recurrence (§3), run per chunk of 64 tokens backwards: a forward sweep keeps
// the state at each chunk boundary; each chunk then recomputes its 64 states (and w, u) from its
// boundary state and runs the token-by-token adjoint over them. This is the exact gradient of
// gdn_recurrent_forward as computed in the working precision.
template <class T>
void gdn_backward(const GdnShape& shape, const int64_t* offsets, size_t num_seqs, const T* q,
                  const T* k, const T* v, const T* g, const T* beta, const T* initial_state,
                  const T* d_out, const T* d_final_state, T* d_q, T* d_k, T* d_v, T* d_g, T* d_beta,
                  T* d_initial_state) {
  check_gdn_args("gdn_backward", shape, offsets, num_seqs,
                 {{"q", q}, {"k", k}, {"v", v}, {"g", g}, {"beta", beta}, {"d_out", d_out},
                  {"d_q", d_q}, {"d_k", d_k}, {"d_v", d_v}, {"d_g", d_g}, {"d_beta", d_beta}});
  const int64_t Hk = shape.num_key_heads, Hv = shape.num_value_heads, dk = shape.key_dim,
                dv = shape.value_dim, r = Hv / Hk, SS = dk * dv, C = kChunk;
  const int64_t tasks = static_cast<int64_t>(num_seqs) * Hk;
  MLPT_SEQOPS_PARALLEL_FOR(tasks > 1 && (offsets[num_seqs] - offsets[0]) * Hv * SS >= (1 << 20))
  for (int64_t task = 0; task < tasks; ++task) {
    const int64_t s = task / Hk, hk = task % Hk;
    GdnTask<T> tk{shape, offsets[s], offsets[s + 1] - offsets[s], hk, r, q, k};
    const int64_t nchunks = (tk.len + C - 1) / C;
    auto buf = [](int64_t n) { return std::vector<T>(static_cast<size_t>(n)); };
    std::vector<T> bound = buf(std::max<int64_t>(nchunks, 1) * SS);  // state entering each chunk
    std::vector<T> states = buf((C + 1) * SS);                      // S_{c0-1+i}, i = 0..n
    std::vector<T> W = buf(C * dv), U = buf(C * dv), G = buf(SS), dw = buf(dv), du = buf(dv);
    for (int64_t t = 0; t < tk.len; ++t) {  // d_q, d_k are summed over the r value heads
      std::fill(d_q + ((tk.start + t) * Hk + hk) * dk, d_q + ((tk.start + t) * Hk + hk + 1) * dk, T(0));
      std::fill(d_k + ((tk.start + t) * Hk + hk) * dk, d_k + ((tk.start + t) * Hk + hk + 1) * dk, T(0));
    }
    for (int64_t h = hk * r; h < (hk + 1) * r; ++h) {
      const int64_t sh = s * Hv + h;
      // Forward sweep: keep the chunk-boundary states.
      T* S = states.data();
      if (initial_state)
        std::copy(initial_state + sh * SS, initial_state + (sh + 1) * SS, S);
      else
        std::fill(S, S + SS, T(0));
      for (int64_t t = 0; t < tk.len; ++t) {
        if (t % C == 0) std::copy(S, S + SS, bound.begin() + (t / C) * SS);
        const int64_t i = tk.vh(t, h);
        gdn_step<T>(dk, dv, S, nullptr, tk.k(t), v + i * dv, g[i], beta[i], W.data(), U.data(), nullptr);
      }
      if (d_final_state)
        std::copy(d_final_state + sh * SS, d_final_state + (sh + 1) * SS, G.begin());
      else
        std::fill(G.begin(), G.end(), T(0));
      for (int64_t c = nchunks - 1; c >= 0; --c) {
        const int64_t c0 = c * C, n = std::min(C, tk.len - c0);
        std::copy(bound.begin() + c * SS, bound.begin() + (c + 1) * SS, states.begin());
        for (int64_t i = 0; i < n; ++i) {  // recompute S_t, w_t, u_t inside the chunk
          T* St = states.data() + (i + 1) * SS;
          std::copy(St - SS, St, St);
          const int64_t vi = tk.vh(c0 + i, h);
          gdn_step<T>(dk, dv, St, nullptr, tk.k(c0 + i), v + vi * dv, g[vi], beta[vi],
                      W.data() + i * dv, U.data() + i * dv, nullptr);
        }
        for (int64_t i = n - 1; i >= 0; --i) {
          const int64_t t = c0 + i, vi = tk.vh(t, h);
          const T *St = states.data() + (i + 1) * SS, *Sp = states.data() + i * SS;
          const T *qt = tk.q(t), *kt = tk.k(t), *dO = d_out + vi * dv, *u = U.data() + i * dv,
                  *w = W.data() + i * dv, *vt = v + vi * dv;
          T* dqt = d_q + ((tk.start + t) * Hk + hk) * dk;
          T* dkt = d_k + ((tk.start + t) * Hk + hk) * dk;
          const T alpha = std::exp(g[vi]), bt = beta[vi];
          // G += q dOᵀ; dq = S_t dO; du = Gᵀ k; dk = G u.
          std::fill(du.begin(), du.end(), T(0));
          for (int64_t a = 0; a < dk; ++a) {
            T* Ga = G.data() + a * dv;
            const T* Sa = St + a * dv;
            const T qa = qt[a], ka = kt[a];
            T sq = 0, sk = 0;
            for (int64_t j = 0; j < dv; ++j) {
              Ga[j] += qa * dO[j];
              sq += Sa[j] * dO[j];
              du[j] += ka * Ga[j];
              sk += Ga[j] * u[j];
            }
            dqt[a] += sq;
            dkt[a] += sk;
          }
          // dv = beta du; dbeta = du.(v - w); dw = -beta du.
          T db = 0;
          T* dvt = d_v + vi * dv;
          for (int64_t j = 0; j < dv; ++j) {
            dvt[j] = bt * du[j];
            db += du[j] * (vt[j] - w[j]);
            dw[j] = -bt * du[j];
          }
          d_beta[vi] = db;
          // w = alpha S_{t-1}ᵀ k: G~ = G + k dwᵀ; dk += alpha S_{t-1} dw; dalpha = <G~, S_{t-1}>;
          // then G <- alpha G~ (the gradient w.r.t. S_{t-1}).
          T dalpha = 0;
          for (int64_t a = 0; a < dk; ++a) {
            T* Ga = G.data() + a * dv;
            const T* Sa = Sp + a * dv;
            const T ka = kt[a];
            T sk = 0;
            for (int64_t j = 0; j < dv; ++j) {
              const T gt = Ga[j] + ka * dw[j];
              sk += Sa[j] * dw[j];
              dalpha += gt * Sa[j];
              Ga[j] = alpha * gt;
            }
            dkt[a] += alpha * sk;
          }
          d_g[vi] = alpha * dalpha;
        }
      }
      if (d_initial_state) std::copy(G.begin(), G.end(), d_initial_state + sh * SS);
    }
  }
}

#define MLPT_GDN_INSTANTIATE(T)                                                                  \
  template void gdn_recurrent_forward<T>(const GdnShape&, const int64_t*, size_t, const T*,      \
                                         const T*, const T*, const T*, const T*, const T*, T*, T*); \
  template void gdn_chunked_forward<T>(const GdnShape&, const int64_t*, size_t, const T*,        \
                                       const T*, const T*, const T*, const T*, const T*, T*, T*);   \
  template void gdn_backward<T>(const GdnShape&, const int64_t*, size_t, const T*, const T*,     \
                                const T*, const T*, const T*, const T*, const T*, const T*, T*,  \
                                T*, T*, T*, T*, T*);
MLPT_GDN_INSTANTIATE(float)
MLPT_GDN_INSTANTIATE(double)
#undef MLPT_GDN_INSTANTIATE

}  // namespace mlpt::ref::cpu
