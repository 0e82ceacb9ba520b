// GDN forward (gdn.hpp): the chunked form against the token-by-token recurrence (the definition),
// packing against sequences run alone, decode continuation from a final state, closed forms for
// length 1 and full decay, and no NaN at the decay extremes.
//
// Tolerances (relative max-norm, against the recurrence): chunked and recurrent differ only in
// summation order and in where exp() is taken (e^{gamma_i-gamma_j} vs a product of alphas). With
// unit keys and beta < 1 the state and (I + A)^-1 stay O(1), so the error is a few hundred ulps at
// most: double ~1e-13 in practice, checked at 1e-10; float ~1e-6 in practice, checked at 1e-4.
#include <catch2/catch.hpp>

#include "seqops_testing.hpp"

using namespace seqops_testing;
using mlpt::ref::cpu::GdnShape;

namespace {

constexpr double kTolDouble = 1e-10, kTolFloat = 1e-4;

struct Case {
  const char* name;
  GdnShape shape;
  std::vector<int64_t> lengths;
  bool with_init;
};

const Case kCases[] = {
    {"Hk=Hv, T=64 (one full chunk)", {2, 2, 8, 8}, {64}, false},
    {"Hv=4Hk, T=200 (not a multiple of 64)", {1, 4, 8, 16}, {200}, true},
    {"T<64", {2, 4, 16, 8}, {37}, true},
    {"T spans several chunks", {2, 2, 32, 32}, {300}, false},
    {"packed batch of 3 different lengths", {2, 4, 16, 16}, {130, 5, 64}, true},
    {"packed batch, no initial state", {1, 2, 8, 8}, {65, 128, 1}, false},
};

}  // namespace

TEMPLATE_TEST_CASE("gdn chunked forward equals the recurrence", "[gdn]", float, double) {
  const double tol = std::is_same_v<TestType, double> ? kTolDouble : kTolFloat;
  uint64_t seed = 1;
  for (const Case& c : kCases) {
    SECTION(c.name) {
      GdnProblem p = make_gdn(seed, c.shape, c.lengths, c.with_init);
      Vec<TestType> fr, fc;
      Vec<TestType> orr = run_gdn<TestType>(p, false, &fr), oc = run_gdn<TestType>(p, true, &fc);
      INFO("out rel err " << rel_err(oc, orr) << ", state rel err " << rel_err(fc, fr));
      CHECK(rel_err(oc, orr) < tol);
      CHECK(rel_err(fc, fr) < tol);
      CHECK(all_finite(oc));
      // Sanity: the outputs are not trivially zero and depend on the state.
      CHECK(*std::max_element(orr.begin(), orr.end()) > TestType(1e-3));
    }
    ++seed;
  }
}

TEST_CASE("gdn float forward agrees with double", "[gdn]") {
  GdnProblem p = make_gdn(11, {2, 4, 32, 32}, {150, 20}, true);
  Vec<double> fd;
  Vec<float> ff;
  Vec<double> od = run_gdn<double>(p, false, &fd);
  Vec<float> of = run_gdn<float>(p, true, &ff);
  CHECK(rel_err(of, od) < kTolFloat);
  CHECK(rel_err(ff, fd) < kTolFloat);
}

TEMPLATE_TEST_CASE("gdn packed batch equals each sequence alone", "[gdn]", float, double) {
  const GdnShape s{2, 4, 8, 16};
  const std::vector<int64_t> lengths{70, 0, 3, 129};  // includes an empty sequence
  GdnProblem p = make_gdn(21, s, lengths, true);
  const int64_t Hk = s.num_key_heads, Hv = s.num_value_heads, dk = s.key_dim, dv = s.value_dim;
  const size_t SS = size_t(Hv * dk * dv);
  for (bool chunked : {false, true}) {
    Vec<TestType> fs;
    Vec<TestType> out = run_gdn<TestType>(p, chunked, &fs);
    for (size_t i = 0; i < lengths.size(); ++i) {
      GdnProblem one{s, {0, lengths[i]}, {}, {}, {}, {}, {}, {}};
      const int64_t a = p.offsets[i], b = p.offsets[i + 1];
      auto slice = [&](const Vec<double>& x, int64_t per_token) {
        return Vec<double>(x.begin() + a * per_token, x.begin() + b * per_token);
      };
      one.q = slice(p.q, Hk * dk);
      one.k = slice(p.k, Hk * dk);
      one.v = slice(p.v, Hv * dv);
      one.g = slice(p.g, Hv);
      one.beta = slice(p.beta, Hv);
      one.init.assign(p.init.begin() + i * SS, p.init.begin() + (i + 1) * SS);
      Vec<TestType> fs1;
      Vec<TestType> out1 = run_gdn<TestType>(one, chunked, &fs1);
      INFO("sequence " << i << (chunked ? " chunked" : " recurrent"));
      // The same per-(sequence, head) computation runs in both: bitwise equal.
      CHECK(std::equal(out1.begin(), out1.end(), out.begin() + a * Hv * dv));
      CHECK(std::equal(fs1.begin(), fs1.end(), fs.begin() + i * SS));
      if (lengths[i] == 0)  // an empty sequence passes its initial state through
        CHECK(rel_err(fs1, cast<TestType>(one.init)) == 0);
    }
  }
}

TEMPLATE_TEST_CASE("gdn decode continuation from the final state equals one pass", "[gdn]", float, double) {
  const double tol = std::is_same_v<TestType, double> ? kTolDouble : kTolFloat;
  const GdnShape s{1, 2, 16, 16};
  const int64_t T = 150, T1 = 97;
  GdnProblem full = make_gdn(31, s, {T}, true);
  const int64_t Hk = s.num_key_heads, Hv = s.num_value_heads, dk = s.key_dim, dv = s.value_dim;
  auto part = [&](int64_t a, int64_t b) {
    GdnProblem p{s, {0, b - a}, {}, {}, {}, {}, {}, {}};
    auto sl = [&](const Vec<double>& x, int64_t w) { return Vec<double>(x.begin() + a * w, x.begin() + b * w); };
    p.q = sl(full.q, Hk * dk);
    p.k = sl(full.k, Hk * dk);
    p.v = sl(full.v, Hv * dv);
    p.g = sl(full.g, Hv);
    p.beta = sl(full.beta, Hv);
    return p;
  };
  Vec<TestType> fs_full;
  Vec<TestType> out_full = run_gdn<TestType>(full, false, &fs_full);
  for (bool chunked_prefill : {false, true}) {
    GdnProblem head = part(0, T1);
    head.init = full.init;
    Vec<TestType> fs1;
    Vec<TestType> out = run_gdn<TestType>(head, chunked_prefill, &fs1);
    // Decode the rest one token at a time, each step starting from the previous final state.
    Vec<TestType> state = fs1;
    for (int64_t t = T1; t < T; ++t) {
      GdnProblem step = part(t, t + 1);
      step.init.assign(state.begin(), state.end());
      Vec<TestType> next;
      Vec<TestType> o = run_gdn<TestType>(step, false, &next);
      out.insert(out.end(), o.begin(), o.end());
      state = next;
    }
    INFO((chunked_prefill ? "chunked" : "recurrent") << " prefill");
    if (chunked_prefill) {
      CHECK(rel_err(out, out_full) < tol);
      CHECK(rel_err(state, fs_full) < tol);
    } else {  // the same operations in the same order
      CHECK(out == out_full);
      CHECK(state == fs_full);
    }
  }
}

TEMPLATE_TEST_CASE("gdn closed forms: one token, and full decay", "[gdn]", float, double) {
  const double tol = std::is_same_v<TestType, double> ? 1e-13 : 1e-6;
  const GdnShape s{1, 2, 4, 4};
  // From a zero state S_1 = k (beta v)ᵀ, so o = (q.k) beta v; with alpha = e^g = 0 (g = -1e4) the
  // state is cleared at every step, so every token obeys the same formula.
  for (int64_t T : {int64_t(1), int64_t(100)}) {
    GdnProblem p = make_gdn(41, s, {T}, false, T == 1 ? -0.5 : -1e4, T == 1 ? -0.1 : -1e4);
    for (bool chunked : {false, true}) {
      Vec<TestType> out = run_gdn<TestType>(p, chunked);
      Vec<double> expect(out.size());
      for (int64_t t = 0; t < T; ++t)
        for (int64_t h = 0; h < 2; ++h) {
          double qk = 0;
          for (int64_t a = 0; a < 4; ++a) qk += p.q[t * 4 + a] * p.k[t * 4 + a];
          for (int64_t j = 0; j < 4; ++j)
            expect[(t * 2 + h) * 4 + j] = qk * p.beta[t * 2 + h] * p.v[(t * 2 + h) * 4 + j];
        }
      INFO("T=" << T << (chunked ? " chunked" : " recurrent"));
      CHECK(all_finite(out));
      CHECK(rel_err(out, expect) < tol);
    }
  }
}

TEMPLATE_TEST_CASE("gdn decay extremes stay finite and consistent", "[gdn]", float, double) {
  const double tol = std::is_same_v<TestType, double> ? kTolDouble : kTolFloat;
  const GdnShape s{1, 2, 8, 8};
  struct Range { const char* name; double lo, hi; };
  for (Range r : {Range{"g = 0 (no decay)", 0.0, 0.0}, Range{"strong decay", -80.0, -20.0},
                  Range{"mixed", -30.0, 0.0}}) {
    GdnProblem p = make_gdn(51, s, {200}, true, r.lo, r.hi);
    Vec<TestType> fr, fc;
    Vec<TestType> orr = run_gdn<TestType>(p, false, &fr), oc = run_gdn<TestType>(p, true, &fc);
    INFO(r.name << ": out rel err " << rel_err(oc, orr));
    CHECK(all_finite(orr));
    CHECK(all_finite(oc));
    CHECK(all_finite(fc));
    CHECK(rel_err(oc, orr) < tol);
    CHECK(rel_err(fc, fr) < tol);
  }
}

TEST_CASE("gdn rejects bad shapes and offsets with a clear error", "[gdn]") {
  std::vector<float> x(64, 0.f);
  std::vector<int64_t> off{0, 2};
  CHECK_THROWS_WITH(mlpt::ref::cpu::gdn_recurrent_forward<float>({2, 3, 4, 4}, off.data(), 1, x.data(), x.data(),
                                                                  x.data(), x.data(), x.data(), nullptr, x.data(), nullptr),
                    Catch::Contains("not a multiple of num_key_heads"));
  std::vector<int64_t> bad{0, 3, 2};
  CHECK_THROWS_WITH(mlpt::ref::cpu::gdn_chunked_forward<float>({1, 1, 4, 4}, bad.data(), 2, x.data(), x.data(),
                                                               x.data(), x.data(), x.data(), nullptr, x.data(), nullptr),
                    Catch::Contains("non-decreasing"));
  CHECK_THROWS_WITH(mlpt::ref::cpu::gdn_chunked_forward<float>({1, 1, 4, 4}, off.data(), 1, x.data(), nullptr,
                                                               x.data(), x.data(), x.data(), nullptr, x.data(), nullptr),
                    Catch::Contains("k is null"));
}
