// Shared test helpers for the sequence ops: seeded random inputs in the ranges the model produces,
// error norms, and a finite-difference driver.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <random>
#include <vector>

#include "backends/cpu/gdn.hpp"

namespace seqops_testing {

template <class T>
using Vec = std::vector<T>;

inline std::vector<int64_t> offsets_of(const std::vector<int64_t>& lengths) {
  std::vector<int64_t> o{0};
  for (int64_t n : lengths) o.push_back(o.back() + n);
  return o;
}

template <class T>
Vec<T> uniform(std::mt19937_64& rng, size_t n, double lo, double hi) {
  std::uniform_real_distribution<double> d(lo, hi);
  Vec<T> x(n);
  for (auto& e : x) e = static_cast<T>(d(rng));
  return x;
}

// Rows of length dim L2-normalised, then multiplied by `scale` (the model's q̂, k̂ of §2.4.4).
template <class T>
void normalise_rows(Vec<T>& x, int64_t dim, double scale) {
  for (size_t r = 0; r < x.size() / static_cast<size_t>(dim); ++r) {
    double s = 0;
    for (int64_t c = 0; c < dim; ++c) s += double(x[r * dim + c]) * double(x[r * dim + c]);
    const double f = scale / std::sqrt(s + 1e-6);
    for (int64_t c = 0; c < dim; ++c) x[r * dim + c] = static_cast<T>(double(x[r * dim + c]) * f);
  }
}

template <class T>
Vec<T> cast(const Vec<double>& x) {
  return Vec<T>(x.begin(), x.end());
}

// max |a - b| / max(max |b|, floor): the relative max-norm error of a against reference b.
template <class A, class B>
double rel_err(const Vec<A>& a, const Vec<B>& b, double floor = 1e-30) {
  double num = 0, den = floor;
  for (size_t i = 0; i < a.size(); ++i) {
    num = std::max(num, std::abs(double(a[i]) - double(b[i])));
    den = std::max(den, std::abs(double(b[i])));
  }
  return a.size() == b.size() ? num / den : INFINITY;
}

template <class T>
bool all_finite(const Vec<T>& x) {
  return std::all_of(x.begin(), x.end(), [](T e) { return std::isfinite(e); });
}

template <class T>
double dot(const Vec<T>& a, const Vec<T>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += double(a[i]) * double(b[i]);
  return s;
}

// Central differences of loss() w.r.t. every element of x (restored afterwards).
inline Vec<double> finite_differences(Vec<double>& x, const std::function<double()>& loss, double h) {
  Vec<double> d(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double x0 = x[i];
    x[i] = x0 + h;
    const double lp = loss();
    x[i] = x0 - h;
    const double lm = loss();
    x[i] = x0;
    d[i] = (lp - lm) / (2 * h);
  }
  return d;
}

// A packed GDN problem in float64 (cast for float runs): normalised q (with dk^-1/2) and k,
// g = log decay in [g_lo, g_hi], beta in (0.05, 0.95), optional initial states.
struct GdnProblem {
  mlpt::ref::cpu::GdnShape shape;
  std::vector<int64_t> offsets;
  Vec<double> q, k, v, g, beta, init;
  size_t num_seqs() const { return offsets.size() - 1; }
  int64_t tokens() const { return offsets.back(); }
  size_t out_size() const { return size_t(tokens() * shape.num_value_heads * shape.value_dim); }
  size_t state_size() const {
    return num_seqs() * size_t(shape.num_value_heads * shape.key_dim * shape.value_dim);
  }
};

inline GdnProblem make_gdn(uint64_t seed, mlpt::ref::cpu::GdnShape s, const std::vector<int64_t>& lengths,
                           bool with_init, double g_lo = -1.0, double g_hi = -0.01) {
  std::mt19937_64 rng(seed);
  GdnProblem p{s, offsets_of(lengths), {}, {}, {}, {}, {}, {}};
  const size_t T = size_t(p.tokens());
  p.q = uniform<double>(rng, T * s.num_key_heads * s.key_dim, -1, 1);
  p.k = uniform<double>(rng, T * s.num_key_heads * s.key_dim, -1, 1);
  normalise_rows(p.q, s.key_dim, 1.0 / std::sqrt(double(s.key_dim)));
  normalise_rows(p.k, s.key_dim, 1.0);
  p.v = uniform<double>(rng, T * s.num_value_heads * s.value_dim, -1, 1);
  p.g = uniform<double>(rng, T * s.num_value_heads, g_lo, g_hi);
  p.beta = uniform<double>(rng, T * s.num_value_heads, 0.05, 0.95);
  if (with_init) p.init = uniform<double>(rng, p.state_size(), -0.5, 0.5);
  return p;
}

// Runs the recurrent or chunked forward of p in precision T; returns out, writes final states.
template <class T>
Vec<T> run_gdn(const GdnProblem& p, bool chunked, Vec<T>* final_state = nullptr) {
  Vec<T> q = cast<T>(p.q), k = cast<T>(p.k), v = cast<T>(p.v), g = cast<T>(p.g), b = cast<T>(p.beta),
         init = cast<T>(p.init), out(p.out_size());
  if (final_state) final_state->assign(p.state_size(), T(0));
  auto f = chunked ? &mlpt::ref::cpu::gdn_chunked_forward<T> : &mlpt::ref::cpu::gdn_recurrent_forward<T>;
  f(p.shape, p.offsets.data(), p.num_seqs(), q.data(), k.data(), v.data(), g.data(), b.data(),
    init.empty() ? nullptr : init.data(), out.data(), final_state ? final_state->data() : nullptr);
  return out;
}

}  // namespace seqops_testing
