// Causal GQA attention (attention.hpp): forward against a naive float64 implementation with an
// explicit causal mask over the whole kv range, decode over a kv prefix against the last rows of
// the full forward, and the backward against float64 central finite differences.
//
// Tolerances: the reference differs only in summation order, so double agrees to ~1e-15 (checked at
// 1e-12) and float to ~1e-7 (checked at 1e-5). Finite differences as in gdn_backward_test.cpp.
#include "backends/cpu/attention.hpp"

#include <catch2/catch.hpp>
#include <cstdlib>
#include <limits>
#include <string>

#include "backends/cpu/isa_path.hpp"
#include "seqops_testing.hpp"

using namespace seqops_testing;
using mlpt::ref::cpu::AttentionShape;

namespace {

struct AttnProblem {
  AttentionShape shape;
  std::vector<int64_t> q_off, kv_off;
  Vec<double> q, k, v;
  size_t num_seqs() const { return q_off.size() - 1; }
  size_t out_size() const { return size_t(q_off.back() * shape.num_heads * shape.head_dim); }
};

// kv_lens[s] >= q_lens[s]; scores are O(few) so the softmax is neither flat nor one-hot.
AttnProblem make_attn(uint64_t seed, AttentionShape s, const std::vector<int64_t>& q_lens,
                      const std::vector<int64_t>& kv_lens) {
  std::mt19937_64 rng(seed);
  AttnProblem p{s, offsets_of(q_lens), offsets_of(kv_lens), {}, {}, {}};
  p.q = uniform<double>(rng, size_t(p.q_off.back() * s.num_heads * s.head_dim), -1.5, 1.5);
  p.k = uniform<double>(rng, size_t(p.kv_off.back() * s.num_kv_heads * s.head_dim), -1.5, 1.5);
  p.v = uniform<double>(rng, size_t(p.kv_off.back() * s.num_kv_heads * s.head_dim), -1, 1);
  return p;
}

// The definition, written independently: a full score matrix per (sequence, head) with -inf above
// the causal diagonal (shifted by the kv prefix), softmax over the whole row.
Vec<double> naive_attention(const AttnProblem& p) {
  const int64_t H = p.shape.num_heads, Hkv = p.shape.num_kv_heads, D = p.shape.head_dim;
  Vec<double> out(p.out_size(), 0.0);
  for (size_t s = 0; s < p.num_seqs(); ++s) {
    const int64_t ql = p.q_off[s + 1] - p.q_off[s], kl = p.kv_off[s + 1] - p.kv_off[s];
    for (int64_t h = 0; h < H; ++h) {
      const int64_t hk = h / (H / Hkv);
      for (int64_t i = 0; i < ql; ++i) {
        std::vector<double> sc(static_cast<size_t>(kl));
        for (int64_t j = 0; j < kl; ++j) {
          const bool visible = j <= (kl - ql) + i;
          double d = 0;
          for (int64_t c = 0; c < D; ++c)
            d += p.q[((p.q_off[s] + i) * H + h) * D + c] * p.k[((p.kv_off[s] + j) * Hkv + hk) * D + c];
          sc[j] = visible ? d / std::sqrt(double(D)) : -std::numeric_limits<double>::infinity();
        }
        const double mx = *std::max_element(sc.begin(), sc.end());
        double z = 0;
        for (double& x : sc) z += (x = std::exp(x - mx));
        for (int64_t j = 0; j < kl; ++j)
          for (int64_t c = 0; c < D; ++c)
            out[((p.q_off[s] + i) * H + h) * D + c] +=
                sc[j] / z * p.v[((p.kv_off[s] + j) * Hkv + hk) * D + c];
      }
    }
  }
  return out;
}

template <class T>
Vec<T> run_attention(const AttnProblem& p) {
  Vec<T> q = cast<T>(p.q), k = cast<T>(p.k), v = cast<T>(p.v), out(p.out_size(), T(7));
  mlpt::ref::cpu::attention_forward<T>(p.shape, p.q_off.data(), p.kv_off.data(), p.num_seqs(), q.data(),
                                       k.data(), v.data(), out.data());
  return out;
}

}  // namespace

TEMPLATE_TEST_CASE("attention forward matches a naive masked float64 attention", "[attention]", float,
                   double) {
  const double tol = std::is_same_v<TestType, double> ? 1e-12 : 1e-5;
  struct Case {
    const char* name;
    AttentionShape s;
    std::vector<int64_t> ql, kl;
  };
  const Case cases[] = {
      {"MHA, one sequence", {4, 4, 16}, {50}, {50}},
      {"GQA 4:1, packed with an empty sequence", {8, 2, 32}, {33, 0, 1, 70}, {33, 0, 1, 70}},
      {"GQA with kv prefixes (decode / next turn)", {4, 2, 8}, {1, 5, 20}, {40, 5, 64}},
      {"queries without keys of their own: empty q over a non-empty kv", {2, 1, 8}, {0, 3}, {7, 3}},
  };
  uint64_t seed = 200;
  for (const Case& c : cases) {
    SECTION(c.name) {
      AttnProblem p = make_attn(seed, c.s, c.ql, c.kl);
      Vec<TestType> out = run_attention<TestType>(p);
      Vec<double> ref = naive_attention(p);
      INFO("rel err " << rel_err(out, ref));
      CHECK(rel_err(out, ref) < tol);
      CHECK(all_finite(out));
    }
    ++seed;
  }
}

TEMPLATE_TEST_CASE("attention decode over a kv prefix equals the last rows of the full forward",
                   "[attention]", float, double) {
  const double tol = std::is_same_v<TestType, double> ? 1e-14 : 1e-6;
  const AttentionShape s{4, 2, 16};
  const std::vector<int64_t> lens{37, 1, 90};
  const std::vector<int64_t> new_q{1, 1, 7};  // decode steps and a 7-token next turn
  AttnProblem full = make_attn(300, s, lens, lens);
  AttnProblem dec = full;
  dec.q_off = offsets_of(new_q);
  dec.q.clear();
  const int64_t H = s.num_heads, D = s.head_dim;
  Vec<double> expect;
  Vec<TestType> full_out = run_attention<TestType>(full);
  for (size_t i = 0; i < lens.size(); ++i) {
    const int64_t first = full.q_off[i] + lens[i] - new_q[i];
    dec.q.insert(dec.q.end(), full.q.begin() + first * H * D, full.q.begin() + (first + new_q[i]) * H * D);
    expect.insert(expect.end(), full_out.begin() + first * H * D,
                  full_out.begin() + (first + new_q[i]) * H * D);
  }
  Vec<TestType> out = run_attention<TestType>(dec);
  CHECK(rel_err(out, expect) < tol);
}

TEST_CASE("attention backward matches finite differences", "[attention][backward]") {
  // GQA 2:1, packed: full causal, a kv prefix, a length-1 sequence, an empty query set over a kv.
  AttnProblem p = make_attn(400, {4, 2, 6}, {12, 5, 1, 0}, {12, 17, 1, 3});
  std::mt19937_64 rng(401);
  const Vec<double> R = uniform<double>(rng, p.out_size(), -1, 1);
  auto loss = [&] { return dot(run_attention<double>(p), R); };
  Vec<double> dq(p.q.size(), 7), dk(p.k.size(), 7), dv(p.v.size(), 7);  // 7: must be overwritten
  mlpt::ref::cpu::attention_backward<double>(p.shape, p.q_off.data(), p.kv_off.data(), p.num_seqs(),
                                             p.q.data(), p.k.data(), p.v.data(), R.data(), dq.data(),
                                             dk.data(), dv.data());
  const double h = 1e-5, tol = 1e-7;
  Vec<double> fq = finite_differences(p.q, loss, h), fk = finite_differences(p.k, loss, h),
              fv = finite_differences(p.v, loss, h);
  INFO("rel err dq " << rel_err(dq, fq, 1.0) << " dk " << rel_err(dk, fk, 1.0) << " dv "
                     << rel_err(dv, fv, 1.0));
  CHECK(rel_err(dq, fq, 1.0) < tol);
  CHECK(rel_err(dk, fk, 1.0) < tol);
  CHECK(rel_err(dv, fv, 1.0) < tol);
  // The kv positions of the sequence without queries get exactly zero gradient.
  const int64_t tail = p.kv_off[3] * 2 * 6;
  CHECK(std::all_of(dk.begin() + tail, dk.end(), [](double x) { return x == 0.0; }));

  SECTION("float backward agrees with double") {
    Vec<float> q = cast<float>(p.q), k = cast<float>(p.k), v = cast<float>(p.v), r = cast<float>(R);
    Vec<float> fdq(q.size()), fdk(k.size()), fdv(v.size());
    mlpt::ref::cpu::attention_backward<float>(p.shape, p.q_off.data(), p.kv_off.data(), p.num_seqs(),
                                              q.data(), k.data(), v.data(), r.data(), fdq.data(), fdk.data(),
                                              fdv.data());
    CHECK(rel_err(fdq, dq) < 1e-5);
    CHECK(rel_err(fdk, dk) < 1e-5);
    CHECK(rel_err(fdv, dv) < 1e-5);
  }
}

TEST_CASE("attention rejects more queries than kv positions", "[attention]") {
  std::vector<float> x(64, 0.f);
  std::vector<int64_t> qo{0, 3}, ko{0, 2};
  CHECK_THROWS_WITH(mlpt::ref::cpu::attention_forward<float>({2, 1, 4}, qo.data(), ko.data(), 1, x.data(),
                                                             x.data(), x.data(), x.data()),
                    Catch::Contains("3 queries but only 2 kv positions"));
  CHECK_THROWS_WITH(mlpt::ref::cpu::attention_forward<float>({3, 2, 4}, qo.data(), qo.data(), 1, x.data(),
                                                             x.data(), x.data(), x.data()),
                    Catch::Contains("does not divide"));
}

TEST_CASE("the CPU kernels run the instruction-set path MLPT_CPU_PATH names, else the best this CPU has",
          "[attention][isa]") {
  using mlpt::ref::cpu::IsaPath;
  const IsaPath path = mlpt::ref::cpu::isa_path();
  INFO("running the " << mlpt::ref::cpu::isa_path_name(path) << " kernels");
  CHECK(mlpt::ref::cpu::isa_path_supported(path));
  CHECK(mlpt::ref::cpu::isa_path_supported(IsaPath::baseline));
  if (const char* forced = std::getenv("MLPT_CPU_PATH"); forced && *forced) {
    CHECK(std::string(mlpt::ref::cpu::isa_path_name(path)) == forced);
  } else {  // the best: no better path is supported
    for (IsaPath better : {IsaPath::avx512, IsaPath::avx2})
      if (static_cast<int>(better) > static_cast<int>(path))
        CHECK_FALSE(mlpt::ref::cpu::isa_path_supported(better));
  }
}
