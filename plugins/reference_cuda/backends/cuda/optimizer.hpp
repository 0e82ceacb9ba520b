// The trainer's device-side numerics (docs/benchmark.md §2-§3): the GRPO token loss and its gradient
// coefficient, the global gradient norm, and AdamW on fp32 master weights with fp32 moments that
// refreshes the bf16 working copy. Mirrors trainer/grpo_loss.hpp and trainer/adamw.hpp.
#pragma once

#include "backends/cuda/context.hpp"
#include "ops/shapes.hpp"

namespace mlpt::ref::cuda {

// Per token: with r = exp(logp_theta − logp_prev), loss = −pw·r and coef = d loss / d logp_theta
// (PPO clipping when clip_low/clip_high >= 0: the clipped branch has zero gradient); pw == 0 gives 0.
// pw (plan weights) fp32 [n]; outputs fp32 [n].
void grpo_token_loss(const Context& ctx, int64_t n, const float* pw, const float* logp_theta, const float* logp_prev,
                     bool ppo_clip, double clip_low, double clip_high, float* loss, float* coef);

// *sum_sq += Σ g² (fp64 accumulator on the device).
void sum_squares(const Context& ctx, int64_t n, const float* g, double* sum_sq);

using AdamWStep = ::mlpt::ref::AdamWStep;  // ops/shapes.hpp
// One update of n parameters: master (fp32), m, v updated in place, working (bf16, may be NULL)
// refreshed from the new master weights.
void adamw_update(const Context& ctx, int64_t n, const AdamWStep& s, const float* grad, float* master, float* m,
                  float* v, bf16* working);

}  // namespace mlpt::ref::cuda
