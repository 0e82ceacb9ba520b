#include "backends/cuda/context.hpp"

#include <string>
#include <utility>

#include "backends/cuda/cudnn_attention.hpp"
#include "backends/cuda/gemm.hpp"
#include "mlpt/sdk/error.hpp"

namespace mlpt::ref::cuda {

void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess)
    throw sdk::Error(MLPT_INTERNAL, std::string("CUDA: ") + what + ": " + cudaGetErrorName(status) + " (" +
                                        cudaGetErrorString(status) + ")");
}

void check(cublasStatus_t status, const char* what) {
  if (status != CUBLAS_STATUS_SUCCESS)
    throw sdk::Error(MLPT_INTERNAL, std::string("cuBLAS: ") + what + ": " + cublasGetStatusName(status) +
                                        " (" + cublasGetStatusString(status) + ")");
}

void check_launch(const char* kernel) {
  check(cudaGetLastError(), kernel);
}

Context create_context() {
  return create_context(BackendOptions{});
}

Context create_context(const BackendOptions& options) {
  Context ctx;
  check(cudaStreamCreateWithFlags(&ctx.stream, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  cublasStatus_t st = cublasCreate(&ctx.blas);
  if (st != CUBLAS_STATUS_SUCCESS) {
    cudaStreamDestroy(ctx.stream);
    check(st, "cublasCreate");
  }
  check(cublasSetStream(ctx.blas, ctx.stream), "cublasSetStream");
  try {
    ctx.gemm = new GemmEngine(ctx.stream, ctx.blas, options);
    if (options.attention == AttentionLibrary::cudnn) ctx.attention = new CudnnAttention(ctx.stream);
  } catch (...) {
    destroy_context(ctx);
    throw;
  }
  return ctx;
}

void select_device(int device, const char* component) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count <= device)
    throw sdk::Error(MLPT_FAILED_PRECONDITION, std::string(component) + ": CUDA device " +
                                                   std::to_string(device) + " is not available (" +
                                                   std::to_string(count) + " visible)");
  check(cudaSetDevice(device), "cudaSetDevice");
}

void destroy_context(Context& ctx) {
  delete ctx.attention;
  delete ctx.gemm;
  if (ctx.blas) cublasDestroy(ctx.blas);
  if (ctx.stream) cudaStreamDestroy(ctx.stream);
  ctx = Context{};
}

DeviceBuffer::DeviceBuffer(size_t bytes) {
  reserve(bytes);
}
DeviceBuffer::~DeviceBuffer() {
  if (ptr_) cudaFree(ptr_);
}
DeviceBuffer::DeviceBuffer(DeviceBuffer&& o) noexcept
    : ptr_(std::exchange(o.ptr_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}
DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    if (ptr_) cudaFree(ptr_);
    ptr_ = std::exchange(o.ptr_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
  }
  return *this;
}
void DeviceBuffer::reserve(size_t bytes) {
  if (bytes <= bytes_) return;
  // Work queued on any stream may still use the old block: wait for it before freeing.
  if (ptr_) check(cudaDeviceSynchronize(), "DeviceBuffer::reserve: synchronise");
  if (ptr_) check(cudaFree(ptr_), "cudaFree");
  ptr_ = nullptr;
  bytes_ = 0;
  check(cudaMalloc(&ptr_, bytes), ("cudaMalloc of " + std::to_string(bytes) + " bytes").c_str());
  bytes_ = bytes;
}

}  // namespace mlpt::ref::cuda
