// What every CUDA op takes: the stream it runs on and the cuBLAS handle bound to it, plus error
// checks that name the failing call. CUDA reference backend (see ../cpu for the oracle).
//
// Conventions of backends/cuda (docs/qwen35-architecture.md §7): activations and their gradients are
// BF16 (`bf16`), every reduction and every product accumulates in FP32, and the numerically
// sensitive tensors are FP32: GDN gates and state, router logits and weights, softmax statistics,
// weight gradients. All pointers are device pointers unless a parameter says "host"; offsets of
// packed sequences live on the device. Ops are asynchronous on ctx.stream.
#pragma once

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace mlpt::ref {
struct BackendOptions;  // device_model/backend_options.hpp
}

namespace mlpt::ref::cuda {

using bf16 = __nv_bfloat16;

class GemmEngine;      // gemm.hpp
class CudnnAttention;  // cudnn_attention.hpp

struct Context {
  cudaStream_t stream = nullptr;
  cublasHandle_t blas = nullptr;
  GemmEngine* gemm = nullptr;           // every dense product's library and cached plans (gemm.hpp)
  CudnnAttention* attention = nullptr;  // cuDNN's fused attention when cuda_attention = "cudnn", else NULL
};

// Throws mlpt::sdk::Error (MLPT_INTERNAL) naming `what` and the CUDA / cuBLAS error.
void check(cudaError_t status, const char* what);
void check(cublasStatus_t status, const char* what);
// After a kernel launch: reports launch-configuration errors (not asynchronous faults).
void check_launch(const char* kernel);

// Makes CUDA device `device` current for the calling thread; throws MLPT_FAILED_PRECONDITION
// "<component>: CUDA device N is not available (M visible)" when there is no such device.
void select_device(int device, const char* component);

// A context on a new non-blocking stream of the current device, its products through the library
// `options` names (default BackendOptions when omitted); destroy_context() releases it.
Context create_context();
Context create_context(const BackendOptions& options);
void destroy_context(Context& ctx);

// Device memory that frees itself; bytes are uninitialised unless zeroed.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* get() const { return ptr_; }
  template <class T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }
  size_t bytes() const { return bytes_; }
  // Grows (never shrinks) to at least `bytes`; contents are lost when it grows.
  void reserve(size_t bytes);

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// Elementwise conversions (n elements), on ctx.stream.
void to_bf16(const Context& ctx, int64_t n, const float* x, bf16* y);
void to_float(const Context& ctx, int64_t n, const bf16* x, float* y);
// y += x (fp32), e.g. residual connections and gradient sums.
void add_inplace(const Context& ctx, int64_t n, const bf16* x, bf16* y);
void add_inplace(const Context& ctx, int64_t n, const float* x, float* y);
// y = x (rounded to bf16 / copied), ORing bit i % 32 of changed[i / 32] where y[i]'s bits changed
// (ops/ops.hpp, to_bf16_marking): a warp per 32 elements, its ballot one word.
void to_bf16_marking(const Context& ctx, int64_t n, const float* x, bf16* y, uint32_t* changed);
void copy_marking(const Context& ctx, int64_t n, const float* x, float* y, uint32_t* changed);

}  // namespace mlpt::ref::cuda
