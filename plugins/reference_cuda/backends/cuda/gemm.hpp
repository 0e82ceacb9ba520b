// Every dense product of the CUDA backend goes through one GemmEngine per context: cuBLAS
// (cublasGemmEx) or cuBLASLt (cublasLtMatmul with the heuristic's best algorithm for the shape,
// asked once per shape and cached, and a workspace), chosen by BackendOptions::gemm. BF16 inputs,
// FP32 accumulation, BF16 or FP32 output. The engine also holds the device array of pointers the
// grouped expert products read, so they need no allocation or synchronisation per call.
//
// No cuBLASLt epilogue applies to this model: it has no biases, and its activation (SwiGLU) is not
// one of the library's epilogues; the one fusion that pays, accumulating into the output
// (beta = 1), both libraries do.
#pragma once

#include <cublasLt.h>

#include <memory>
#include <vector>

#include "backends/cuda/context.hpp"
#include "device_model/backend_options.hpp"
#include "device_model/gemm_plan_cache.hpp"

namespace mlpt::ref::cuda {

// One column-major product C[m, n] = op(A) · op(B) (+ beta · C).
struct GemmCall {
  cublasOperation_t ta, tb;
  int m, n, k;
  const void* A;
  int lda;
  const void* B;
  int ldb;
  void* C;
  int ldc;
};

// A cuBLASLt plan: descriptors and the algorithm for one GemmShapeKey (or none found).
class LtPlan {
 public:
  LtPlan() = default;
  LtPlan(LtPlan&& o) noexcept;
  LtPlan& operator=(LtPlan&& o) noexcept;
  ~LtPlan();
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
  size_t workspace = 0;
  bool found = false;  // false: the heuristic offered nothing; cublasGemmEx runs the product
};

class GemmEngine {
 public:
  GemmEngine(cudaStream_t stream, cublasHandle_t blas, const BackendOptions& options);
  ~GemmEngine();
  GemmEngine(const GemmEngine&) = delete;
  GemmEngine& operator=(const GemmEngine&) = delete;

  const BackendOptions& options() const { return options_; }
  void set_options(const BackendOptions& o) { options_ = o; }
  // C = op(A)·op(B) + beta·C on the context's stream; `what` names the caller in errors.
  void run(const GemmCall& g, bool fp32_out, float beta, const char* what);
  // A device array of at least `count` pointers, valid until the next call (stream-ordered: the
  // products queued before keep reading what they were given until theirs is overwritten).
  void** pointer_array(size_t count);
  // cuBLASLt plans: shapes seen, heuristic calls made, and products with no cuBLASLt algorithm.
  const GemmPlanCache<LtPlan>& plans() const { return plans_; }
  size_t fallbacks() const { return fallbacks_; }
  // The engine's device scratch (cuBLASLt workspace, pointer array): recorded work refers to it.
  std::vector<const void*> scratch_addresses() const { return {workspace_.get(), pointers_.get()}; }

 private:
  LtPlan make_plan(const GemmShapeKey& key);
  cudaStream_t stream_;
  cublasHandle_t blas_;
  BackendOptions options_;
  cublasLtHandle_t lt_ = nullptr;
  DeviceBuffer workspace_, pointers_;
  GemmPlanCache<LtPlan> plans_;
  size_t fallbacks_ = 0;
};

// The context's engine; throws MLPT_INTERNAL when the context has none.
GemmEngine& gemm_engine(const Context& ctx);

}  // namespace mlpt::ref::cuda
