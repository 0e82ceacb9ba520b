// Helpers for the CUDA backend's op tests: device vectors, bf16 rounding on the host, random
// problems, and the error metric every tolerance is stated in: max |gpu − cpu| / max |cpu|
// (the error relative to the tensor's scale).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include "backends/cuda/context.hpp"

namespace cuda_testing {

using mlpt::ref::cuda::bf16;
using mlpt::ref::cuda::check;

template <class T>
struct DeviceVec {
  mlpt::ref::cuda::DeviceBuffer buf;
  size_t n = 0;
  DeviceVec() = default;
  explicit DeviceVec(size_t count) : buf(std::max<size_t>(count, 1) * sizeof(T)), n(count) {
    check(cudaMemset(buf.get(), 0, std::max<size_t>(count, 1) * sizeof(T)), "test: zero");
    check(cudaDeviceSynchronize(), "test: synchronise");  // the ops run on their own stream
  }
  explicit DeviceVec(const std::vector<T>& h) : DeviceVec(h.size()) { upload(h); }
  void upload(const std::vector<T>& h) {
    check(cudaMemcpy(buf.get(), h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice), "test: upload");
    check(cudaDeviceSynchronize(), "test: synchronise");
  }
  std::vector<T> download() const {
    std::vector<T> h(n);
    check(cudaDeviceSynchronize(), "test: synchronise");
    check(cudaMemcpy(h.data(), buf.get(), n * sizeof(T), cudaMemcpyDeviceToHost), "test: download");
    return h;
  }
  T* get() const { return buf.as<T>(); }
};

inline float round_bf16(float x) { return __bfloat162float(__float2bfloat16(x)); }

inline std::vector<float> random_floats(std::mt19937_64& rng, size_t n, double lo, double hi, bool bf16_exact) {
  std::uniform_real_distribution<double> d(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = bf16_exact ? round_bf16(static_cast<float>(d(rng))) : static_cast<float>(d(rng));
  return v;
}

inline std::vector<bf16> to_bf16(const std::vector<float>& v) {
  std::vector<bf16> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = __float2bfloat16(v[i]);
  return out;
}
inline std::vector<float> to_float(const std::vector<bf16>& v) {
  std::vector<float> out(v.size());
  for (size_t i = 0; i < v.size(); ++i) out[i] = __bfloat162float(v[i]);
  return out;
}

// A bf16 tensor on the device, with the float values the CPU reference sees (exactly the same).
struct Bf16Tensor {
  std::vector<float> host;
  DeviceVec<bf16> dev;
  explicit Bf16Tensor(const std::vector<float>& h) : host(h), dev(to_bf16(h)) {}
  bf16* get() const { return dev.get(); }
};
inline Bf16Tensor random_bf16(std::mt19937_64& rng, size_t n, double lo = -1, double hi = 1) {
  return Bf16Tensor(random_floats(rng, n, lo, hi, true));
}

// max |a − b| / max |b| (b the reference); 0 when both are all zeros.
template <class A>
double scaled_error(const std::vector<A>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    num = std::max(num, std::fabs(static_cast<double>(a[i]) - b[i]));
    den = std::max(den, std::fabs(static_cast<double>(b[i])));
  }
  return den == 0 ? num : num / den;
}
inline double scaled_error(const std::vector<bf16>& a, const std::vector<float>& b) {
  return scaled_error(to_float(a), b);
}

inline std::vector<int64_t> offsets_of(const std::vector<int64_t>& lengths) {
  std::vector<int64_t> o{0};
  for (int64_t l : lengths) o.push_back(o.back() + l);
  return o;
}

// Whether a CUDA device is usable (the tests are registered only where one is, but say so if not).
inline bool have_gpu() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

}  // namespace cuda_testing
