#include "backends/cuda/gemm.hpp"

#include <string>
#include <utility>

#include "mlpt/sdk/error.hpp"

namespace mlpt::ref::cuda {

namespace {

// Hopper's recommended cuBLASLt workspace; allocated at the first cuBLASLt product.
constexpr size_t kWorkspaceBytes = size_t(32) << 20;
// Shapes kept: the model's weight shapes times the row counts one run sees.
constexpr size_t kPlanCapacity = 4096;

void check_lt(cublasStatus_t st, const char* what) {
  check(st, what);
}

}  // namespace

LtPlan::LtPlan(LtPlan&& o) noexcept {
  *this = std::move(o);
}
LtPlan& LtPlan::operator=(LtPlan&& o) noexcept {
  if (this != &o) {
    std::swap(desc, o.desc), std::swap(a, o.a), std::swap(b, o.b), std::swap(c, o.c);
    algo = o.algo, workspace = o.workspace, found = o.found;
  }
  return *this;
}
LtPlan::~LtPlan() {
  if (c) cublasLtMatrixLayoutDestroy(c);
  if (b) cublasLtMatrixLayoutDestroy(b);
  if (a) cublasLtMatrixLayoutDestroy(a);
  if (desc) cublasLtMatmulDescDestroy(desc);
}

GemmEngine::GemmEngine(cudaStream_t stream, cublasHandle_t blas, const BackendOptions& options)
    : stream_(stream), blas_(blas), options_(options), plans_(kPlanCapacity) {
  check_lt(cublasLtCreate(&lt_), "cublasLtCreate");
}

GemmEngine::~GemmEngine() {
  if (lt_) cublasLtDestroy(lt_);
}

LtPlan GemmEngine::make_plan(const GemmShapeKey& k) {
  LtPlan p;
  const cudaDataType_t out = k.fp32_out ? CUDA_R_32F : CUDA_R_16BF;
  check_lt(cublasLtMatmulDescCreate(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "cublasLtMatmulDescCreate");
  const cublasOperation_t ta = k.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N,
                          tb = k.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  check_lt(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)), "TRANSA");
  check_lt(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)), "TRANSB");
  // Stored shapes: op(A) is m x k, op(B) k x n.
  check_lt(cublasLtMatrixLayoutCreate(&p.a, CUDA_R_16BF, k.trans_a ? k.k : k.m, k.trans_a ? k.m : k.k, k.lda),
           "cublasLtMatrixLayoutCreate(A)");
  check_lt(cublasLtMatrixLayoutCreate(&p.b, CUDA_R_16BF, k.trans_b ? k.n : k.k, k.trans_b ? k.k : k.n, k.ldb),
           "cublasLtMatrixLayoutCreate(B)");
  check_lt(cublasLtMatrixLayoutCreate(&p.c, out, k.m, k.n, k.ldc), "cublasLtMatrixLayoutCreate(C)");
  cublasLtMatmulPreference_t pref = nullptr;
  check_lt(cublasLtMatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate");
  const uint64_t ws = kWorkspaceBytes;
  const uint32_t align = static_cast<uint32_t>(k.alignment);
  cublasStatus_t st =
      cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws));
  for (auto attr : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
    if (st == CUBLAS_STATUS_SUCCESS)
      st = cublasLtMatmulPreferenceSetAttribute(pref, attr, &align, sizeof(align));
  cublasLtMatmulHeuristicResult_t result{};
  int returned = 0;
  if (st == CUBLAS_STATUS_SUCCESS)
    st = cublasLtMatmulAlgoGetHeuristic(lt_, p.desc, p.a, p.b, p.c, p.c, pref, 1, &result, &returned);
  cublasLtMatmulPreferenceDestroy(pref);
  if (st == CUBLAS_STATUS_SUCCESS && returned > 0) {
    p.algo = result.algo;
    p.workspace = result.workspaceSize;
    p.found = true;
  } else if (st != CUBLAS_STATUS_SUCCESS && st != CUBLAS_STATUS_NOT_SUPPORTED) {
    check_lt(st, "cublasLtMatmulAlgoGetHeuristic");
  }
  return p;
}

void GemmEngine::run(const GemmCall& g, bool fp32_out, float beta, const char* what) {
  const float alpha = 1.f;
  if (options_.gemm == GemmLibrary::cublaslt) {
    const GemmShapeKey key{g.ta == CUBLAS_OP_T,
                           g.tb == CUBLAS_OP_T,
                           g.m,
                           g.n,
                           g.k,
                           g.lda,
                           g.ldb,
                           g.ldc,
                           fp32_out,
                           beta != 0.f,
                           common_alignment({g.A, g.B, g.C})};
    LtPlan& p = plans_.get(key, [&] { return make_plan(key); });
    if (p.found) {
      if (p.workspace > workspace_.bytes()) workspace_.reserve(kWorkspaceBytes);
      check(cublasLtMatmul(lt_, p.desc, &alpha, g.A, p.a, g.B, p.b, &beta, g.C, p.c, g.C, p.c, &p.algo,
                           workspace_.get(), p.workspace, stream_),
            what);
      return;
    }
    ++fallbacks_;
  }
  check(cublasGemmEx(blas_, g.ta, g.tb, g.m, g.n, g.k, &alpha, g.A, CUDA_R_16BF, g.lda, g.B, CUDA_R_16BF,
                     g.ldb, &beta, g.C, fp32_out ? CUDA_R_32F : CUDA_R_16BF, g.ldc, CUBLAS_COMPUTE_32F,
                     CUBLAS_GEMM_DEFAULT),
        what);
}

void** GemmEngine::pointer_array(size_t count) {
  pointers_.reserve(count * sizeof(void*));
  return pointers_.as<void*>();
}

GemmEngine& gemm_engine(const Context& ctx) {
  if (!ctx.gemm)
    throw sdk::Error(MLPT_INTERNAL, "CUDA context without a GEMM engine (made by create_context)");
  return *ctx.gemm;
}

}  // namespace mlpt::ref::cuda
