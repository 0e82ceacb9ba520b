// Turning logits into tokens and logprobs. Ids >= `valid` (padding rows of the LM head beyond the
// tokenizer's vocabulary, §2.7) are never sampled and take no probability mass.
//
// Which logprob the engine reports: the log-probability of the sampled token under the
// distribution it was actually drawn from, i.e. softmax(logits / temperature) restricted to the
// top-k / top-p set and renormalised. At the benchmark's training settings (temperature 1, top-p 1,
// no top-k) that is exactly log_softmax(logits)[token], which is what the trainer's
// compute_logprobs returns, so the two compare directly there.
//
// The draw walks the whole vocabulary in id order, or, with top-k / top-p, the kept set from the
// most to the least likely id (ties in id order); the CUDA sampler (backends/cuda/head.hpp) walks
// the same way, so both draw the same id from the same logits.
//
// Randomness is counter-based: the uniform draw for a token depends only on (seed, absolute
// position of the token in the sequence), never on batching or on other requests.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

namespace mlpt::ref {

struct SamplingParams {
  float temperature = 1.0f;  // > 0
  float top_p = 1.0f;        // (0, 1]
  int32_t top_k = 0;         // 0 = off
  uint64_t seed = 0;
};

struct SampledToken {
  int32_t token;
  float logprob;  // under the distribution sampled from (see above)
};

SampledToken sample_token(const float* logits, int64_t valid, const SamplingParams& params, uint64_t counter);

// log_softmax(logits[0, valid))[token], accumulated in double.
template <class T>
double token_logprob(const T* logits, int64_t valid, int32_t token);

// The n most likely ids with their log_softmax values, most likely first (ties: lower id first).
std::vector<std::pair<int32_t, double>> top_logprobs(const float* logits, int64_t valid, int64_t n);

}  // namespace mlpt::ref
