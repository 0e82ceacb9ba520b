// Normalisations (docs/qwen35-architecture.md §2.2, §2.4.4, §2.4.8; backward §3), row-wise over the last
// dimension D. Backward functions overwrite dx and accumulate (+=) into weight gradients.
// CPU reference backend; T is float or double.
#pragma once

#include <cstdint>

namespace mlpt::ref::cpu {

// Zero-centred RMSNorm: y = x · rsqrt(mean(x²) + eps) · (1 + w).
template <class T>
void rmsnorm_forward(int64_t rows, int64_t D, const T* x, const T* w, double eps, T* y);
template <class T>
void rmsnorm_backward(int64_t rows, int64_t D, const T* x, const T* w, double eps, const T* dy, T* dx, T* dw);

// GDN gated output norm, plain weight: y = w ⊙ (o · rsqrt(mean(o²) + eps)) ⊙ SiLU(z).
template <class T>
void gated_rmsnorm_forward(int64_t rows, int64_t D, const T* o, const T* z, const T* w, double eps, T* y);
template <class T>
void gated_rmsnorm_backward(int64_t rows, int64_t D, const T* o, const T* z, const T* w, double eps, const T* dy,
                            T* d_o, T* dz, T* dw);

// L2 normalisation with a scale: y = scale · x / sqrt(Σx² + eps). Rows are read with stride
// `x_stride` (elements between row starts) so q and k can be read in place from the conv output.
template <class T>
void l2norm_forward(int64_t rows, int64_t D, const T* x, int64_t x_stride, double eps, double scale, T* y);
template <class T>
void l2norm_backward(int64_t rows, int64_t D, const T* x, int64_t x_stride, double eps, double scale, const T* dy,
                     T* dx, int64_t dx_stride);

}  // namespace mlpt::ref::cpu
