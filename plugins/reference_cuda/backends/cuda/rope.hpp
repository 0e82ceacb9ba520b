// Partial rotary position embedding, NeoX rotate-half pairing (docs/qwen35-architecture.md §2.5): the
// CUDA counterpart of ../cpu/rope.hpp; angles in fp32 from fp64-computed inverse frequencies.
#pragma once

#include "backends/cuda/context.hpp"

namespace mlpt::ref::cuda {

// x [rows, heads, D] bf16 rotated in place; positions [rows] (device).
void rope_forward(const Context& ctx, int64_t rows, int64_t heads, int64_t D, int64_t rotary_dim, double theta,
                  const int64_t* positions, bf16* x);
// The adjoint (rotation by the negative angle), in place on the gradient.
void rope_backward(const Context& ctx, int64_t rows, int64_t heads, int64_t D, int64_t rotary_dim, double theta,
                   const int64_t* positions, bf16* dx);

}  // namespace mlpt::ref::cuda
