// Central finite differences in float64: the independent reference for every backward here.
#pragma once

#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

namespace mlpt_test {

inline std::vector<double> random_vector(size_t n, uint64_t seed, double scale = 1.0) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> d(0.0, scale);
  std::vector<double> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

inline double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// Checks analytic[i] == d loss / d x[i] for up to `max_checks` indices spread over x, with
// |analytic - fd| <= tol * max(1, |fd|). `loss` reads x (which is perturbed in place and restored).
template <class Loss>
void check_gradient(const std::string& what, std::vector<double>& x, const std::vector<double>& analytic, Loss&& loss,
                    double tol = 1e-6, size_t max_checks = 48, double h = 1e-5) {
  REQUIRE(analytic.size() == x.size());
  size_t step = std::max<size_t>(1, x.size() / max_checks);
  double worst = 0;
  for (size_t i = 0; i < x.size(); i += step) {
    double keep = x[i];
    x[i] = keep + h;
    double up = loss();
    x[i] = keep - h;
    double down = loss();
    x[i] = keep;
    double fd = (up - down) / (2 * h);
    double err = std::fabs(analytic[i] - fd) / std::max(1.0, std::fabs(fd));
    worst = std::max(worst, err);
    if (err > tol) {
      INFO(what << "[" << i << "]: analytic " << analytic[i] << " vs finite difference " << fd);
      CHECK(err <= tol);
      return;
    }
  }
  INFO(what << ": worst relative error " << worst);
  CHECK(worst <= tol);
}

}  // namespace mlpt_test
