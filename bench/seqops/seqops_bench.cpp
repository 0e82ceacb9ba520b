// bench_seqops: time and effective GFLOP/s of the CPU sequence ops at the size of a ~100M-parameter
// model's layer (GDN Hk=4, Hv=8, dk=dv=64; attention H=8, Hkv=2, D=64; T=2048 tokens), as ratios
// against same-run baselines: the token-by-token recurrence for the chunked GDN forward, and a
// naive row-by-row attention (strided dot products, no transposition) for attention.
//
// Effective FLOP counts (same count for every implementation of an op, so GFLOP/s ratios are
// speed ratios): GDN forward 6·T·Hv·dk·dv (w = Sᵀk, the rank-1 update, o = Sᵀq), backward 2x the
// forward; causal attention forward 4·D·H·T(T+1)/2 (QKᵀ and PV), backward 2.5x the forward.
// Times are process CPU time (ratios use it; robust on a shared machine) and wall time.
// Attention is also reported as a fraction of the machine's sgemm peak (OpenBLAS, 1024³, same
// thread count, measured first in the same run). Naive baselines are skipped above T = 8192 (they
// would take minutes); `attention` as the second argument runs attention only (e.g. at 65536),
// `gdn` GDN only.
// Usage: bench_seqops [T] [all|attention|gdn]   (OMP_NUM_THREADS sets the threads with OpenMP)
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <functional>
#include <random>
#include <vector>

#if defined(_OPENMP)
#include <omp.h>
#endif

#include <cblas.h>
#include <cstring>

#include "backends/cpu/attention.hpp"
#include "backends/cpu/gdn.hpp"

using namespace mlpt::ref::cpu;

namespace {

// Process CPU seconds (all threads) and wall seconds: the median of `reps` runs, with the CPU
// seconds' spread (fastest and slowest run) and the count, so that each row says what it is. The
// CPU clock is the one to compare on a shared machine: it does not count time spent waiting for a
// core.
struct Timing {
  double cpu, wall;
  double cpu_min = 0, cpu_max = 0;
  int reps = 0;
};

double cpu_now() {
  timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}

Timing median_seconds(const std::function<void()>& f, int reps) {
  std::vector<double> cpu, wall;
  for (int r = 0; r < reps; ++r) {
    const double c0 = cpu_now();
    auto t0 = std::chrono::steady_clock::now();
    f();
    wall.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    cpu.push_back(cpu_now() - c0);
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
  };
  return Timing{median(cpu), median(wall), *std::min_element(cpu.begin(), cpu.end()), *std::max_element(cpu.begin(), cpu.end()), reps};
}

std::vector<float> rand_vec(std::mt19937& rng, size_t n, float lo, float hi) {
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> x(n);
  for (auto& e : x) e = d(rng);
  return x;
}

void normalise(std::vector<float>& x, int64_t dim, float scale) {
  for (size_t r = 0; r < x.size() / size_t(dim); ++r) {
    float s = 0;
    for (int64_t c = 0; c < dim; ++c) s += x[r * dim + c] * x[r * dim + c];
    for (int64_t c = 0; c < dim; ++c) x[r * dim + c] *= scale / std::sqrt(s + 1e-6f);
  }
}

// The baseline: causal GQA attention one row at a time with strided kv rows and dot products.
void naive_attention_forward(const AttentionShape& s, int64_t T, const float* q, const float* k, const float* v,
                             float* out) {
  const int64_t H = s.num_heads, Hkv = s.num_kv_heads, D = s.head_dim;
  const float scale = 1.f / std::sqrt(float(D));
  std::vector<float> p(static_cast<size_t>(T));
  for (int64_t i = 0; i < T; ++i)
    for (int64_t h = 0; h < H; ++h) {
      const float* qi = q + (i * H + h) * D;
      const int64_t hk = h / (H / Hkv);
      float mx = -INFINITY;
      for (int64_t j = 0; j <= i; ++j) {
        float d = 0;
        for (int64_t c = 0; c < D; ++c) d += qi[c] * k[(j * Hkv + hk) * D + c];
        mx = std::max(mx, p[j] = d * scale);
      }
      float z = 0;
      for (int64_t j = 0; j <= i; ++j) z += (p[j] = std::exp(p[j] - mx));
      float* o = out + (i * H + h) * D;
      std::fill(o, o + D, 0.f);
      for (int64_t j = 0; j <= i; ++j)
        for (int64_t c = 0; c < D; ++c) o[c] += p[j] / z * v[(j * Hkv + hk) * D + c];
    }
}

void naive_attention_backward(const AttentionShape& s, int64_t T, const float* q, const float* k, const float* v,
                              const float* dout, float* dq, float* dk, float* dv) {
  const int64_t H = s.num_heads, Hkv = s.num_kv_heads, D = s.head_dim;
  const float scale = 1.f / std::sqrt(float(D));
  std::fill(dk, dk + T * Hkv * D, 0.f);
  std::fill(dv, dv + T * Hkv * D, 0.f);
  std::vector<float> p(static_cast<size_t>(T)), dp(static_cast<size_t>(T));
  for (int64_t i = 0; i < T; ++i)
    for (int64_t h = 0; h < H; ++h) {
      const float *qi = q + (i * H + h) * D, *doi = dout + (i * H + h) * D;
      const int64_t hk = h / (H / Hkv);
      float mx = -INFINITY;
      for (int64_t j = 0; j <= i; ++j) {
        float d = 0;
        for (int64_t c = 0; c < D; ++c) d += qi[c] * k[(j * Hkv + hk) * D + c];
        mx = std::max(mx, p[j] = d * scale);
      }
      float z = 0;
      for (int64_t j = 0; j <= i; ++j) z += (p[j] = std::exp(p[j] - mx));
      float sum = 0;
      for (int64_t j = 0; j <= i; ++j) {
        p[j] /= z;
        float d = 0;
        for (int64_t c = 0; c < D; ++c) d += doi[c] * v[(j * Hkv + hk) * D + c];
        sum += p[j] * (dp[j] = d);
      }
      float* dqi = dq + (i * H + h) * D;
      std::fill(dqi, dqi + D, 0.f);
      for (int64_t j = 0; j <= i; ++j) {
        const float ds = p[j] * (dp[j] - sum) * scale;
        for (int64_t c = 0; c < D; ++c) {
          dqi[c] += ds * k[(j * Hkv + hk) * D + c];
          dk[(j * Hkv + hk) * D + c] += ds * qi[c];
          dv[(j * Hkv + hk) * D + c] += p[j] * doi[c];
        }
      }
    }
}

double max_rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 1e-30;
  for (size_t i = 0; i < a.size(); ++i) {
    num = std::max(num, double(std::abs(a[i] - b[i])));
    den = std::max(den, double(std::abs(b[i])));
  }
  return num / den;
}

// sgemm GFLOP/s per CPU second: the peak the attention kernels are measured against.
double sgemm_gflops_per_cpu_s() {
  const int n = 1024;
  std::vector<float> a(size_t(n) * n, 0.5f), b(size_t(n) * n, 0.25f), c(size_t(n) * n);
  auto gemm = [&] { cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.f, a.data(), n, b.data(), n, 0.f, c.data(), n); };
  gemm();
  const Timing t = median_seconds(gemm, 5);
  return 2.0 * n * n * double(n) / t.cpu * 1e-9;
}

void header(const char* vs) {
  std::printf("  %-32s %10s %19s %10s %14s %9s\n", "op", "cpu ms", "(min-max, runs)", "wall ms", "GFLOP/cpu-s", vs);
}

// GFLOP/s per CPU second (per core) and the speed ratio against the baseline, both by median CPU time.
void row(const char* name, Timing t, double flops, double base_cpu) {
  char spread[64];
  std::snprintf(spread, sizeof(spread), "(%.1f-%.1f, %d)", t.cpu_min * 1e3, t.cpu_max * 1e3, t.reps);
  std::printf("  %-32s %10.2f %19s %10.2f %14.2f %8.2fx\n", name, t.cpu * 1e3, spread, t.wall * 1e3, flops / t.cpu * 1e-9,
              base_cpu / t.cpu);
}

}  // namespace

int main(int argc, char** argv) {
  const int64_t T = argc > 1 ? std::atoll(argv[1]) : 2048;
  int threads = 1;
#if defined(_OPENMP)
  threads = omp_get_max_threads();
#endif
  std::printf("bench_seqops: T=%lld tokens (one sequence), float, %d thread(s); each figure the median of the runs its row "
              "names (a baseline and what it is compared with run as often)\n",
              (long long)T, threads);
  const bool attention_only = argc > 2 && std::strcmp(argv[2], "attention") == 0;
  const bool gdn_only = argc > 2 && std::strcmp(argv[2], "gdn") == 0;
  const bool naive = T <= 8192;
  openblas_set_num_threads(threads);
  const double peak = sgemm_gflops_per_cpu_s();
  std::printf("sgemm 1024^3 (OpenBLAS, the peak): %.1f GFLOP per CPU second\n", peak);
  std::mt19937 rng(1);
  const int64_t offsets[2] = {0, T};

  if (!attention_only) {  // GDN
    const GdnShape s{4, 8, 64, 64};
    auto q = rand_vec(rng, size_t(T * s.num_key_heads * s.key_dim), -1, 1);
    auto k = rand_vec(rng, q.size(), -1, 1);
    normalise(q, s.key_dim, 1.f / std::sqrt(float(s.key_dim)));
    normalise(k, s.key_dim, 1.f);
    auto v = rand_vec(rng, size_t(T * s.num_value_heads * s.value_dim), -1, 1);
    auto g = rand_vec(rng, size_t(T * s.num_value_heads), -1.f, -0.01f);
    auto beta = rand_vec(rng, g.size(), 0.05f, 0.95f);
    const size_t SS = size_t(s.num_value_heads * s.key_dim * s.value_dim);
    auto init = rand_vec(rng, SS, -0.5f, 0.5f);
    auto dout = rand_vec(rng, v.size(), -1, 1);
    std::vector<float> o_rec(v.size()), o_chk(v.size()), f_rec(SS), f_chk(SS);
    std::vector<float> dq(q.size()), dk(k.size()), dv(v.size()), dg(g.size()), db(g.size()), dinit(SS);
    const double fwd = 6.0 * double(T) * s.num_value_heads * s.key_dim * s.value_dim;
    const Timing t_rec = median_seconds([&] {
      gdn_recurrent_forward<float>(s, offsets, 1, q.data(), k.data(), v.data(), g.data(), beta.data(), init.data(),
                                   o_rec.data(), f_rec.data());
    }, 3);
    const Timing t_chk = median_seconds([&] {
      gdn_chunked_forward<float>(s, offsets, 1, q.data(), k.data(), v.data(), g.data(), beta.data(), init.data(),
                                 o_chk.data(), f_chk.data());
    }, 3);
    const Timing t_bwd = median_seconds([&] {
      gdn_backward<float>(s, offsets, 1, q.data(), k.data(), v.data(), g.data(), beta.data(), init.data(), dout.data(),
                          f_rec.data(), dq.data(), dk.data(), dv.data(), dg.data(), db.data(), dinit.data());
    }, 3);
    std::printf("\nGated DeltaNet  Hk=4 Hv=8 dk=dv=64   (chunked vs recurrent: max rel diff %.1e)\n",
                max_rel_diff(o_chk, o_rec));
    header("vs recur.");
    row("recurrent forward (baseline)", t_rec, fwd, t_rec.cpu);
    row("chunked forward (C=64)", t_chk, fwd, t_rec.cpu);
    row("backward (recompute + adjoint)", t_bwd, 2 * fwd, 3 * t_rec.cpu);
    std::printf("  (backward ratio is against 3x the recurrent forward, the same-count baseline)\n");
    // The chunked form's FLOPs per token and value head, as gdn.cpp does them: the recurrence's
    // 6·dk·dv (Q S, W S, the state update) plus the in-chunk work: U = T diag(beta) V and
    // W = T diag(beta Gamma) K as full C x C products (2·C·(dv+dk)), the intra-chunk attention
    // P V' (2·C·dv), K Kᵀ and Q Kᵀ shared by the r value heads of a key head (4·C·dk / r), and
    // forming T = (I + A)^-1 (C²/3). It is faster only where its FLOP rate (matrix products)
    // exceeds the recurrence's (rank-1 updates of a state that stays in cache) by more than that.
    const double C = 64, kd = double(s.key_dim), vd = double(s.value_dim), r = double(s.num_value_heads / s.num_key_heads);
    const double work =
        (6 * kd * vd + 2 * C * (kd + vd) + 2 * C * vd + 4 * C * kd / r + C * C / 3) / (6 * kd * vd);
    const double rate = (fwd / t_chk.cpu) / (fwd / t_rec.cpu) * work;
    std::printf(
        "  chunked does %.2fx the recurrence's FLOPs at C=64 (in-chunk products and attention); its FLOP "
        "rate is %.2fx "
        "the recurrence's, so it %s\n",
        work, rate,
        rate > work ? "wins"
                    : "loses: its small matrix products do not run faster enough to pay for the extra work");
  }

  if (!gdn_only) {  // attention
    // Past 8k tokens one head pair keeps the run short; the fraction of peak is per head anyway.
    const AttentionShape s = naive ? AttentionShape{8, 2, 64} : AttentionShape{1, 1, 64};
    auto q = rand_vec(rng, size_t(T * s.num_heads * s.head_dim), -1, 1);
    auto k = rand_vec(rng, size_t(T * s.num_kv_heads * s.head_dim), -1, 1);
    auto v = rand_vec(rng, k.size(), -1, 1);
    auto dout = rand_vec(rng, q.size(), -1, 1);
    std::vector<float> o(q.size()), o_naive(q.size()), dq(q.size()), dk(k.size()), dv(k.size()), ndq(q.size()),
        ndk(k.size()), ndv(k.size());
    const double fwd = 4.0 * s.head_dim * s.num_heads * double(T) * double(T + 1) / 2;
    const int reps = naive ? 3 : 1;  // past 8k one run each: no spread, and the row says so
    const Timing tn_f = naive ? median_seconds([&] { naive_attention_forward(s, T, q.data(), k.data(), v.data(), o_naive.data()); }, reps) : Timing{0, 0};
    const Timing t_f = median_seconds([&] {
      attention_forward<float>(s, offsets, offsets, 1, q.data(), k.data(), v.data(), o.data());
    }, reps);
    const Timing tn_b = naive ? median_seconds([&] {
      naive_attention_backward(s, T, q.data(), k.data(), v.data(), dout.data(), ndq.data(), ndk.data(), ndv.data());
    }, reps) : Timing{0, 0};
    const Timing t_b = median_seconds([&] {
      attention_backward<float>(s, offsets, offsets, 1, q.data(), k.data(), v.data(), dout.data(), dq.data(),
                                dk.data(), dv.data());
    }, reps);
    std::printf("\nAttention at T=%lld as a fraction of sgemm peak (median of %d run(s) each): forward %.1f%%, backward %.1f%%\n",
                (long long)T, reps, 100.0 * fwd / t_f.cpu * 1e-9 / peak, 100.0 * 2.5 * fwd / t_b.cpu * 1e-9 / peak);
    if (!naive) return 0;
    std::printf("\nAttention  H=%lld Hkv=%lld D=64 causal   (vs naive: out %.1e, dq %.1e, dk %.1e max rel diff)\n",
                (long long)s.num_heads, (long long)s.num_kv_heads, max_rel_diff(o, o_naive), max_rel_diff(dq, ndq), max_rel_diff(dk, ndk));
    header("vs naive");
    row("naive forward (baseline)", tn_f, fwd, tn_f.cpu);
    row("forward", t_f, fwd, tn_f.cpu);
    row("naive backward (baseline)", tn_b, 2.5 * fwd, tn_b.cpu);
    row("backward", t_b, 2.5 * fwd, tn_b.cpu);
  }
  return 0;
}
