#include "backends/cpu/rope.hpp"

#include <cmath>
#include <vector>

namespace mlpt::ref::cpu {

namespace {
template <class T>
void rotate(int64_t rows, int64_t heads, int64_t D, int64_t rd, double theta, const int64_t* pos, T* x, double sign) {
  const int64_t half = rd / 2;
  std::vector<double> inv_freq(static_cast<size_t>(half));
  for (int64_t i = 0; i < half; ++i) inv_freq[i] = std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(rd));
  std::vector<T> c(static_cast<size_t>(half)), s(static_cast<size_t>(half));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < half; ++i) {
      double a = static_cast<double>(pos[r]) * inv_freq[i];
      c[i] = static_cast<T>(std::cos(a));
      s[i] = static_cast<T>(sign * std::sin(a));
    }
    for (int64_t h = 0; h < heads; ++h) {
      T* v = x + (r * heads + h) * D;
      for (int64_t i = 0; i < half; ++i) {
        T x1 = v[i], x2 = v[i + half];
        v[i] = x1 * c[i] - x2 * s[i];
        v[i + half] = x2 * c[i] + x1 * s[i];
      }
    }
  }
}
}  // namespace

template <class T>
void rope_forward(int64_t rows, int64_t heads, int64_t D, int64_t rotary_dim, double theta, const int64_t* positions,
                  T* x) {
  rotate(rows, heads, D, rotary_dim, theta, positions, x, 1.0);
}

template <class T>
void rope_backward(int64_t rows, int64_t heads, int64_t D, int64_t rotary_dim, double theta,
                   const int64_t* positions, T* dx) {
  rotate(rows, heads, D, rotary_dim, theta, positions, dx, -1.0);
}

template void rope_forward<float>(int64_t, int64_t, int64_t, int64_t, double, const int64_t*, float*);
template void rope_forward<double>(int64_t, int64_t, int64_t, int64_t, double, const int64_t*, double*);
template void rope_backward<float>(int64_t, int64_t, int64_t, int64_t, double, const int64_t*, float*);
template void rope_backward<double>(int64_t, int64_t, int64_t, int64_t, double, const int64_t*, double*);

}  // namespace mlpt::ref::cpu
