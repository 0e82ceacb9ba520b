// Normalisations (docs/qwen35-architecture.md §2.2, §2.4.4, §2.4.8; backward §3), row-wise over the last
// dimension D: the CUDA counterparts of ../cpu/norms.hpp. Statistics in fp32; weights fp32.
// Backward functions overwrite dx and accumulate (+=) into weight gradients (NULL skips them).
#pragma once

#include "backends/cuda/context.hpp"

namespace mlpt::ref::cuda {

// Zero-centred RMSNorm: y = x · rsqrt(mean(x²) + eps) · (1 + w).
void rmsnorm_forward(const Context& ctx, int64_t rows, int64_t D, const bf16* x, const float* w, double eps, bf16* y);
void rmsnorm_backward(const Context& ctx, int64_t rows, int64_t D, const bf16* x, const float* w, double eps,
                      const bf16* dy, bf16* dx, float* dw);

// GDN gated output norm, plain weight: y = w ⊙ (o · rsqrt(mean(o²) + eps)) ⊙ SiLU(z).
void gated_rmsnorm_forward(const Context& ctx, int64_t rows, int64_t D, const bf16* o, const bf16* z, const float* w,
                           double eps, bf16* y);
void gated_rmsnorm_backward(const Context& ctx, int64_t rows, int64_t D, const bf16* o, const bf16* z,
                            const float* w, double eps, const bf16* dy, bf16* d_o, bf16* dz, float* dw);

// L2 normalisation with a scale: y = scale · x / sqrt(Σx² + eps) over rows of D, `heads` rows per
// token: row r is read at x + (r / heads) · x_stride + (r % heads) · D, so q and k are normalised in
// place inside the conv output's token rows. y [rows, D] is fp32 (the GDN core's input precision);
// dx is written with the same layout as x (token stride dx_stride).
void l2norm_forward(const Context& ctx, int64_t rows, int64_t heads, int64_t D, const bf16* x, int64_t x_stride,
                    double eps, double scale, float* y);
void l2norm_backward(const Context& ctx, int64_t rows, int64_t heads, int64_t D, const bf16* x, int64_t x_stride,
                     double eps, double scale, const float* dy, bf16* dx, int64_t dx_stride);

}  // namespace mlpt::ref::cuda
