// The token embedding (docs/qwen35-architecture.md §2.1): a row gather, and its gradient as a row
// scatter-add into the fp32 gradient. Token ids must be in [0, vocab) (the model checks them on the
// host before they reach the device).
#pragma once

#include "backends/cuda/context.hpp"

namespace mlpt::ref::cuda {

// x[t, :] = E[tokens[t], :], E [vocab, H] bf16.
void embedding_forward(const Context& ctx, int64_t tokens, int64_t H, const int32_t* ids, const bf16* E, bf16* x);
// dE[tokens[t], :] += dx[t, :] (fp32 atomics: repeated ids sum in arbitrary order).
void embedding_backward(const Context& ctx, int64_t tokens, int64_t H, const int32_t* ids, const bf16* dx, float* dE);

}  // namespace mlpt::ref::cuda
