#include "trainer/grpo_loss.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace mlpt::ref {

LossPlan plan_loss(const mlpt_train_batch& b, const std::vector<double>& prev, const LossSettings& s,
                   int64_t global_loss_tokens, const std::function<int64_t(int64_t)>& sum_over_group) {
  const int64_t N = b.offsets[b.num_sequences];
  LossPlan p;
  p.weight.assign(static_cast<size_t>(N), 0.0);
  p.sequences = static_cast<int64_t>(b.num_sequences);
  std::vector<double> seq_w;  // TIS-masked importance weights, per token of the current sequence
  double w_sum = 0, diff_sum = 0;
  int64_t w_count = 0, error_masked_tokens = 0;
  for (size_t i = 0; i < b.num_sequences; ++i) {
    int64_t begin = b.offsets[i], end = b.offsets[i + 1];
    int64_t n = 0;
    double log_ratio_sum = 0, err_sum = 0;
    for (int64_t t = begin + 1; t < end; ++t) {
      if (!b.loss_mask[t]) continue;
      double d = prev[t] - static_cast<double>(b.generation_logprobs[t]);
      log_ratio_sum += d;
      err_sum += std::exp(std::fabs(d));
      diff_sum += std::fabs(d);
      ++n;
    }
    if (n == 0) continue;
    bool truncated = b.truncated && b.truncated[i];
    bool error_masked = err_sum / static_cast<double>(n) > s.logprob_error_max;
    p.truncated += truncated;
    p.logprob_error_masked += !truncated && error_masked;
    if (!truncated && error_masked) error_masked_tokens += n;
    if (truncated || error_masked) continue;
    p.num_tokens += n;
    double geo = std::exp(log_ratio_sum / static_cast<double>(n));
    bool tis_ok = geo >= s.tis_min && geo <= s.tis_max;
    p.tis_masked += !tis_ok;
    for (int64_t t = begin + 1; t < end; ++t) {
      if (!b.loss_mask[t]) continue;
      double w = tis_ok ? std::exp(prev[t] - static_cast<double>(b.generation_logprobs[t])) : 0.0;
      p.weight[t] = static_cast<double>(b.advantages[i]) * w;
      w_sum += w;
      ++w_count;
    }
  }
  p.normaliser = p.num_tokens;
  // Collective when in a group: every rank calls it, whatever its own count.
  const int64_t error_masked_everywhere = sum_over_group ? sum_over_group(error_masked_tokens) : error_masked_tokens;
  if (global_loss_tokens > 0) {
    if (global_loss_tokens < p.num_tokens + error_masked_tokens)
      throw std::invalid_argument("global_num_loss_tokens " + std::to_string(global_loss_tokens) +
                                  " is smaller than this share's own " + std::to_string(p.num_tokens + error_masked_tokens) +
                                  " trainable tokens of non-truncated sequences");
    p.normaliser = global_loss_tokens - error_masked_everywhere;
  }
  if (p.normaliser > 0)
    for (double& w : p.weight) w /= static_cast<double>(p.normaliser);
  p.mean_importance_weight = w_count ? w_sum / static_cast<double>(w_count) : 0.0;
  int64_t all = 0;
  for (int64_t t = 0; t < N; ++t) all += b.loss_mask[t] != 0;
  p.mean_abs_logprob_diff = all ? diff_sum / static_cast<double>(all) : 0.0;
  return p;
}

TokenLoss token_loss(double pw, double logp_theta, double logp_prev, const LossSettings& s) {
  if (pw == 0.0) return {0.0, 0.0};
  double r = std::exp(logp_theta - logp_prev);
  if (!s.ppo_clip) return {-pw * r, -pw * r};
  // pw carries the sign of the advantage: −min(r·A, clip(r)·A) per unit |weight|.
  double rc = std::clamp(r, 1.0 - s.clip_low, 1.0 + s.clip_high);
  double unclipped = pw * r, clipped = pw * rc;
  if (unclipped <= clipped) return {-unclipped, -pw * r};
  return {-clipped, 0.0};
}

}  // namespace mlpt::ref
