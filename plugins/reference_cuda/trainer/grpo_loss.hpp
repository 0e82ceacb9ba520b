// The GRPO loss of docs/benchmark.md §3, token level, as the coefficients of ∇log π_θ(t):
//   loss = Σ_i Σ_t −A_i · w_t · m_it · s_i · ρ_t / N_tok
// with w_t = exp(logp_prev − logp_gen) (detached; logp_prev is the trainer's own logprob under the
// weights before the step), m the loss mask, s_i the sample mask (0 for truncated sequences and for
// sequences whose mean_t exp(|logp_gen − logp_prev|) exceeds logprob_error_max), N_tok the valid
// tokens of sequences with s_i = 1 over the whole global batch, and ρ_t the PPO ratio
// exp(logp_θ − logp_prev), optionally clipped (off by default; at the step's start ρ = 1 so
// clipping is inert, as in the reference). seq-mask-TIS: a sequence whose exp(mean_t(logp_prev −
// logp_gen)) lies outside [tis_min, tis_max] keeps s_i = 1 (it counts in N_tok) but gets w = 0.
// Trainable tokens: loss_mask = 1 and not the first token of a sequence (it has no logprob).
// Data parallel (ABI 1.2): given the global count of trainable tokens of non-truncated sequences
// (`global_loss_tokens`, over every rank's share), N_tok is that count less the tokens of the
// sequences the logprob error mask removed on every rank (`sum_over_group` adds up a count over the
// trainer group; none: this share alone, exact when no other rank's mask removes any).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "mlpt/trainer.h"

namespace mlpt::ref {

struct LossSettings {
  double tis_min = 0.999, tis_max = 1.002;
  double logprob_error_max = 2.0;
  bool ppo_clip = false;
  double clip_low = 0.2, clip_high = 0.28;
};

struct LossPlan {
  std::vector<double> weight;  // per token: A_i · w_t · m_it · s_i / N_tok (0 where not trained)
  int64_t num_tokens = 0;      // trainable tokens of this share's kept sequences
  int64_t normaliser = 0;      // N_tok: num_tokens, or the global count less what this share masked
  int64_t sequences = 0, truncated = 0, logprob_error_masked = 0, tis_masked = 0;
  double mean_importance_weight = 0, mean_abs_logprob_diff = 0;
};

// From the batch and the trainer's logprobs under the current weights (one per token).
// `global_loss_tokens` 0: the batch is the whole global batch.
LossPlan plan_loss(const mlpt_train_batch& batch, const std::vector<double>& logp_prev, const LossSettings& settings,
                   int64_t global_loss_tokens = 0, const std::function<int64_t(int64_t)>& sum_over_group = {});

// Loss contribution and d loss / d logp_θ of token t, given its plan weight and the ratio inputs.
struct TokenLoss {
  double loss, grad;
};
TokenLoss token_loss(double plan_weight, double logp_theta, double logp_prev, const LossSettings& settings);

}  // namespace mlpt::ref
