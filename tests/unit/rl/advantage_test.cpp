// Advantages against a second, naive implementation written from the spec's words, and pass@k.
#include <catch2/catch.hpp>

#include <cmath>
#include <random>

#include "core/eval/pass_at_k.hpp"
#include "core/rl/advantage.hpp"

namespace {

// The spec, literally: for each i, collect the others, their mean and Bessel std, then divide.
std::vector<double> naive(const std::vector<double>& r, double eps) {
  std::vector<double> out;
  for (size_t i = 0; i < r.size(); ++i) {
    std::vector<double> others;
    for (size_t j = 0; j < r.size(); ++j)
      if (j != i) others.push_back(r[j]);
    double mean = 0;
    for (double x : others) mean += x;
    mean /= others.size();
    double ss = 0;
    for (double x : others) ss += (x - mean) * (x - mean);
    double sd = others.size() > 1 ? std::sqrt(ss / (others.size() - 1)) : 0.0;
    out.push_back(sd > 0 ? (r[i] - mean) / (sd + eps) : r[i] - mean);
  }
  return out;
}

}  // namespace

TEST_CASE("leave-one-out advantages match the spec written out naively") {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<double> r(16);
    for (auto& x : r) x = (rng() % 3 == 0) ? 1.0 : 0.0;
    auto a = mlpt::rl::leave_one_out_advantages(r, 1e-6);
    auto b = naive(r, 1e-6);
    for (size_t i = 0; i < r.size(); ++i) REQUIRE(a[i] == Approx(b[i]).margin(1e-12));
  }
}

TEST_CASE("all-equal groups get zero advantage, a lone success is not divided by zero") {
  auto zeros = mlpt::rl::leave_one_out_advantages(std::vector<double>(16, 0.0), 1e-6);
  auto ones = mlpt::rl::leave_one_out_advantages(std::vector<double>(16, 1.0), 1e-6);
  for (int i = 0; i < 16; ++i) {
    CHECK(zeros[i] == 0.0);
    CHECK(ones[i] == 0.0);
  }
  // One success among 16: the others of the successful sample are all 0 (std 0): not divided.
  std::vector<double> r(16, 0.0);
  r[3] = 1.0;
  auto a = mlpt::rl::leave_one_out_advantages(r, 1e-6);
  CHECK(a[3] == 1.0);
  // For a failing sample the others contain the success: std = sqrt(1/14 * (1 - 1/15)).
  double mean = 1.0 / 15, sd = std::sqrt((1.0 - 15 * mean * mean) / 14);
  CHECK(a[0] == Approx(-mean / (sd + 1e-6)).epsilon(1e-12));
  CHECK_THROWS(mlpt::rl::leave_one_out_advantages({1.0}, 1e-6));
}

TEST_CASE("pass@k, pass@1 and pass^k") {
  auto m = mlpt::eval::pass_at_k({{0, 0, 1, 0}, {1, 1, 1, 1}, {0, 0, 0, 0}, {1, 0, 0, 0}});
  CHECK(m.pass_at_k == 0.75);
  CHECK(m.pass_hat_k == 0.25);
  CHECK(m.pass_at_1 == Approx(6.0 / 16));
  CHECK(m.k == 4);
  CHECK_THROWS_WITH(mlpt::eval::pass_at_k({{1, 0}, {1}}), Catch::Contains("task 1 has 1 rollouts, expected 2"));
}
