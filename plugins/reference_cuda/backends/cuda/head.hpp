// The output head on the device (docs/qwen35-architecture.md §2.7): fp32 logits from the bf16 LM head,
// per-token logprobs and their gradient for the trainer, and sampling (temperature, top-p) with the
// sampled token's logprob for the engine. Ids >= `valid` (padding rows) take no probability mass.
#pragma once

#include "backends/cuda/context.hpp"
#include "ops/shapes.hpp"

namespace mlpt::ref::cuda {

// logits[rows, V] (fp32) = hidden[rows, H] · W[V, H]ᵀ (bf16 inputs, fp32 accumulation).
void logits_forward(const Context& ctx, int64_t rows, int64_t V, int64_t H, const bf16* hidden, const bf16* W,
                    float* logits);

// logprob[r] = log_softmax(logits[r, 0:valid])[targets[r]], lse[r] the row's log-sum-exp (fp32).
void token_logprobs(const Context& ctx, int64_t rows, int64_t V, int64_t valid, const float* logits,
                    const int32_t* targets, float* logprob, float* lse);

// d logits[r, :] = coef[r] · (onehot(targets[r]) − softmax(logits[r, 0:valid])) as bf16 (0 on
// padding ids and on rows with coef 0): the gradient of Σ_r coef[r] · logprob[r].
void token_logprobs_backward(const Context& ctx, int64_t rows, int64_t V, int64_t valid, const float* logits,
                             const float* lse, const int32_t* targets, const float* coef, bf16* dlogits);

// A vocabulary-parallel rank's part of each row's log-softmax: stats[r] = {max, Σ exp(l − max) over
// [0, valid), logits[r, targets[r]] and 1 where 0 <= targets[r] < V, else 0 and 0} (ops/ops.hpp).
void vocab_logprob_stats(const Context& ctx, int64_t rows, int64_t V, int64_t valid, const float* logits,
                         const int32_t* targets, float* stats);
// logprob and lse per row from every part's stats [parts, rows, 4], combined in double.
void vocab_logprob_combine(const Context& ctx, int64_t rows, int64_t parts, const float* stats, float* logprob,
                           float* lse);

using SamplingRow = ::mlpt::ref::SamplingRow;  // ops/shapes.hpp; the draw is counter_uniform(seed, counter)

// Samples one id per row from softmax(logits / temperature) over [0, valid), restricted to the
// top-p set when top_p < 1: the ids whose probability is at least the threshold τ where the mass
// of {p >= τ} first reaches top_p (ties at τ are all kept). The draw walks the ids as the CPU
// sampler does (model/sampling.hpp): in id order without top-p, from the most to the least likely
// kept id (ties in id order) with it. logprob[r] is the chosen id's log-probability under the
// renormalised distribution it was drawn from.
// A row whose logits are not finite may get token -1.
void sample_tokens(const Context& ctx, int64_t rows, int64_t V, int64_t valid, const float* logits,
                   const SamplingRow* params, int32_t* tokens, float* logprob);

}  // namespace mlpt::ref::cuda
