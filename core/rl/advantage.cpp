#include "core/rl/advantage.hpp"

#include <cmath>

#include "core/error.hpp"

namespace mlpt::rl {

std::vector<double> leave_one_out_advantages(const std::vector<double>& rewards, double epsilon) {
  const size_t n = rewards.size();
  if (n < 2) throw Error(MLPT_INVALID_ARGUMENT, "a GRPO group needs at least 2 samples, got " + std::to_string(n));
  double sum = 0, sum_sq = 0;
  for (double r : rewards) sum += r, sum_sq += r * r;
  std::vector<double> out(n);
  for (size_t i = 0; i < n; ++i) {
    const double m = static_cast<double>(n - 1);  // the others
    const double others_sum = sum - rewards[i];
    const double baseline = others_sum / m;
    // Bessel-corrected variance of the others; with one other sample it is undefined: treat as 0.
    double var = 0;
    if (n >= 3) {
      const double others_sq = sum_sq - rewards[i] * rewards[i];
      var = std::max(0.0, (others_sq - others_sum * others_sum / m) / (m - 1));
    }
    // Sums of 0/1 rewards are exact in double, so an all-equal set of others gives var == 0 exactly.
    const double std_other = std::sqrt(var);
    const double a = rewards[i] - baseline;
    out[i] = std_other > 0 ? a / (std_other + epsilon) : a;
  }
  return out;
}

}  // namespace mlpt::rl
