#include "backends/cpu/norms.hpp"

#include <cmath>

#include "backends/cpu/activations.hpp"

namespace mlpt::ref::cpu {

template <class T>
void rmsnorm_forward(int64_t rows, int64_t D, const T* x, const T* w, double eps, T* y) {
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * D;
    T* yr = y + r * D;
    T ss = 0;
    for (int64_t i = 0; i < D; ++i) ss += xr[i] * xr[i];
    T rstd = T(1) / std::sqrt(ss / T(D) + T(eps));
    for (int64_t i = 0; i < D; ++i) yr[i] = xr[i] * rstd * (T(1) + w[i]);
  }
}

template <class T>
void rmsnorm_backward(int64_t rows, int64_t D, const T* x, const T* w, double eps, const T* dy, T* dx, T* dw) {
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * D;
    const T* dyr = dy + r * D;
    T* dxr = dx + r * D;
    T ss = 0;
    for (int64_t i = 0; i < D; ++i) ss += xr[i] * xr[i];
    T rstd = T(1) / std::sqrt(ss / T(D) + T(eps));
    T dot = 0;  // n · dn
    for (int64_t i = 0; i < D; ++i) {
      T n = xr[i] * rstd;
      T dn = dyr[i] * (T(1) + w[i]);
      if (dw) dw[i] += dyr[i] * n;
      dot += n * dn;
    }
    for (int64_t i = 0; i < D; ++i) {
      T n = xr[i] * rstd;
      dxr[i] = rstd * (dyr[i] * (T(1) + w[i]) - n * dot / T(D));
    }
  }
}

template <class T>
void gated_rmsnorm_forward(int64_t rows, int64_t D, const T* o, const T* z, const T* w, double eps, T* y) {
  for (int64_t r = 0; r < rows; ++r) {
    const T* orow = o + r * D;
    const T* zr = z + r * D;
    T* yr = y + r * D;
    T ss = 0;
    for (int64_t i = 0; i < D; ++i) ss += orow[i] * orow[i];
    T rstd = T(1) / std::sqrt(ss / T(D) + T(eps));
    for (int64_t i = 0; i < D; ++i) yr[i] = w[i] * (orow[i] * rstd) * silu(zr[i]);
  }
}

template <class T>
void gated_rmsnorm_backward(int64_t rows, int64_t D, const T* o, const T* z, const T* w, double eps, const T* dy,
                            T* d_o, T* dz, T* dw) {
  for (int64_t r = 0; r < rows; ++r) {
    const T* orow = o + r * D;
    const T* zr = z + r * D;
    const T* dyr = dy + r * D;
    T ss = 0;
    for (int64_t i = 0; i < D; ++i) ss += orow[i] * orow[i];
    T rstd = T(1) / std::sqrt(ss / T(D) + T(eps));
    T dot = 0;
    for (int64_t i = 0; i < D; ++i) {
      T n = orow[i] * rstd, s = silu(zr[i]);
      T dn = dyr[i] * w[i] * s;
      dz[r * D + i] = dyr[i] * w[i] * n * silu_grad(zr[i]);
      if (dw) dw[i] += dyr[i] * n * s;
      dot += n * dn;
    }
    for (int64_t i = 0; i < D; ++i) {
      T n = orow[i] * rstd;
      T dn = dyr[i] * w[i] * silu(zr[i]);
      d_o[r * D + i] = rstd * (dn - n * dot / T(D));
    }
  }
}

template <class T>
void l2norm_forward(int64_t rows, int64_t D, const T* x, int64_t x_stride, double eps, double scale, T* y) {
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * x_stride;
    T ss = 0;
    for (int64_t i = 0; i < D; ++i) ss += xr[i] * xr[i];
    T f = T(scale) / std::sqrt(ss + T(eps));
    for (int64_t i = 0; i < D; ++i) y[r * D + i] = xr[i] * f;
  }
}

template <class T>
void l2norm_backward(int64_t rows, int64_t D, const T* x, int64_t x_stride, double eps, double scale, const T* dy,
                     T* dx, int64_t dx_stride) {
  for (int64_t r = 0; r < rows; ++r) {
    const T* xr = x + r * x_stride;
    const T* dyr = dy + r * D;
    T ss = 0;
    for (int64_t i = 0; i < D; ++i) ss += xr[i] * xr[i];
    T rn = T(1) / std::sqrt(ss + T(eps));
    T dot = 0;  // ŷ · dy with ŷ = x · rn
    for (int64_t i = 0; i < D; ++i) dot += xr[i] * rn * dyr[i];
    for (int64_t i = 0; i < D; ++i) dx[r * dx_stride + i] = T(scale) * rn * (dyr[i] - xr[i] * rn * dot);
  }
}

#define MLPT_INSTANTIATE(T)                                                                               \
  template void rmsnorm_forward<T>(int64_t, int64_t, const T*, const T*, double, T*);                      \
  template void rmsnorm_backward<T>(int64_t, int64_t, const T*, const T*, double, const T*, T*, T*);        \
  template void gated_rmsnorm_forward<T>(int64_t, int64_t, const T*, const T*, const T*, double, T*);      \
  template void gated_rmsnorm_backward<T>(int64_t, int64_t, const T*, const T*, const T*, double, const T*, \
                                          T*, T*, T*);                                                      \
  template void l2norm_forward<T>(int64_t, int64_t, const T*, int64_t, double, double, T*);                \
  template void l2norm_backward<T>(int64_t, int64_t, const T*, int64_t, double, double, const T*, T*, int64_t);
MLPT_INSTANTIATE(float)
MLPT_INSTANTIATE(double)
#undef MLPT_INSTANTIATE

}  // namespace mlpt::ref::cpu
