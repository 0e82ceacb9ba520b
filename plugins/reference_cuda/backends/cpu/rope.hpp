// Partial rotary position embedding, NeoX rotate-half pairing (docs/qwen35-architecture.md §2.5): on
// the first rotary_dim dims of each head, pair (i, i + rotary_dim/2) is rotated by position ·
// theta^(−2i/rotary_dim); the other dims pass through. For text, M-RoPE reduces to this.
// CPU reference backend; T is float or double.
#pragma once

#include <cstdint>

namespace mlpt::ref::cpu {

// x [rows, heads, D], rotated in place; positions [rows].
template <class T>
void rope_forward(int64_t rows, int64_t heads, int64_t D, int64_t rotary_dim, double theta, const int64_t* positions,
                  T* x);
// The adjoint (rotation by the negative angle), in place on the gradient.
template <class T>
void rope_backward(int64_t rows, int64_t heads, int64_t D, int64_t rotary_dim, double theta,
                   const int64_t* positions, T* dx);

}  // namespace mlpt::ref::cpu
