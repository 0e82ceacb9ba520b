// Row-major products as column-major cuBLAS calls: row-major C = A·Bᵀ is column-major Cᵀ = B·Aᵀ.
#include "backends/cuda/linear.hpp"

#include <cstdint>

#include "backends/cuda/context.hpp"
#include "backends/cuda/gemm.hpp"

namespace mlpt::ref::cuda {

namespace {

using Gemm = GemmCall;

// The column-major call one LinearKind makes, for one group.
Gemm plan(LinearKind kind, const LinearGroup& g) {
  const int M = static_cast<int>(g.M), N = static_cast<int>(g.N), K = static_cast<int>(g.K);
  switch (kind) {
    case LinearKind::forward:  // yᵀ[N,M] = W[N,K] · xᵀ[K,M]
      return {CUBLAS_OP_T, CUBLAS_OP_N, N, M, K, g.W, K, g.a, K, g.out, N};
    case LinearKind::backward_input:  // dxᵀ[K,M] = Wᵀ[K,N] · dyᵀ[N,M]
      return {CUBLAS_OP_N, CUBLAS_OP_N, K, M, N, g.W, K, g.a, N, g.out, K};
    case LinearKind::backward_weight:  // dWᵀ[K,N] += xᵀ[K,M] · dy[M,N]
      return {CUBLAS_OP_N, CUBLAS_OP_T, K, N, M, g.W, K, g.a, N, g.out, K};
  }
  return {};
}

void gemm(const Context& ctx, const Gemm& p, bool fp32_out, float beta, const char* what) {
  gemm_engine(ctx).run(p, fp32_out, beta, what);
}

void check_dims(int64_t M, int64_t N, int64_t K, const char* what) {
  if (M > INT32_MAX || N > INT32_MAX || K > INT32_MAX) check(CUBLAS_STATUS_INVALID_VALUE, what);
}

}  // namespace

void linear_forward(const Context& ctx, int64_t M, int64_t N, int64_t K, const bf16* x, const bf16* W,
                    bf16* y, bool accumulate) {
  if (M == 0 || N == 0) return;
  check_dims(M, N, K, "linear_forward: dimension above 2^31");
  if (K == 0) {
    if (!accumulate)
      check(cudaMemsetAsync(y, 0, size_t(M * N) * sizeof(bf16), ctx.stream), "linear_forward(K=0)");
    return;
  }
  gemm(ctx, plan(LinearKind::forward, {M, N, K, x, W, y}), false, accumulate ? 1.f : 0.f, "linear_forward");
}

void linear_backward_input(const Context& ctx, int64_t M, int64_t N, int64_t K, const bf16* dy, const bf16* W,
                           bf16* dx, bool accumulate) {
  if (M == 0 || K == 0) return;
  check_dims(M, N, K, "linear_backward_input: dimension above 2^31");
  if (N == 0) {
    if (!accumulate)
      check(cudaMemsetAsync(dx, 0, size_t(M * K) * sizeof(bf16), ctx.stream), "linear_backward_input(N=0)");
    return;
  }
  gemm(ctx, plan(LinearKind::backward_input, {M, N, K, dy, W, dx}), false, accumulate ? 1.f : 0.f,
       "linear_backward_input");
}

void linear_backward_weight(const Context& ctx, int64_t M, int64_t N, int64_t K, const bf16* dy,
                            const bf16* x, float* dW) {
  if (M == 0 || N == 0 || K == 0) return;
  check_dims(M, N, K, "linear_backward_weight: dimension above 2^31");
  gemm(ctx, plan(LinearKind::backward_weight, {M, N, K, dy, x, dW}), true, 1.f, "linear_backward_weight");
}

void linear_forward_fp32(const Context& ctx, int64_t M, int64_t N, int64_t K, const bf16* x, const bf16* W,
                         float* y) {
  if (M == 0 || N == 0) return;
  check_dims(M, N, K, "linear_forward_fp32: dimension above 2^31");
  if (K == 0) {
    check(cudaMemsetAsync(y, 0, size_t(M * N) * sizeof(float), ctx.stream), "linear_forward_fp32(K=0)");
    return;
  }
  gemm(ctx, plan(LinearKind::forward, {M, N, K, x, W, y}), true, 0.f, "linear_forward_fp32");
}

void linear_grouped(const Context& ctx, LinearKind kind, const std::vector<LinearGroup>& groups) {
  const bool fp32_out = kind == LinearKind::backward_weight;
  const float beta = fp32_out ? 1.f : 0.f;
  std::vector<Gemm> gemms;
  for (const LinearGroup& g : groups) {
    if (g.M == 0 || g.N == 0 || g.K == 0) continue;
    check_dims(g.M, g.N, g.K, "linear_grouped: dimension above 2^31");
    gemms.push_back(plan(kind, g));
  }
  if (gemms.empty()) return;
  GemmEngine& engine = gemm_engine(ctx);
  if (engine.options().experts == ExpertGemm::per_expert) {  // device_sized's larger batches: grouped
    for (const Gemm& p : gemms) gemm(ctx, p, fp32_out, beta, "linear_grouped(per expert)");
    return;
  }
  // The grouped call takes per-group host arrays of sizes (read at the call) and a device array of
  // pointers (read by the queued kernels: the engine's, overwritten only in stream order).
  const size_t n = gemms.size();
  std::vector<cublasOperation_t> ta(n), tb(n);
  std::vector<int> m(n), nn(n), k(n), lda(n), ldb(n), ldc(n), size(n, 1);
  std::vector<float> alpha(n, 1.f), betas(n, beta);
  std::vector<const void*> ptrs(3 * n);
  for (size_t i = 0; i < n; ++i) {
    const Gemm& p = gemms[i];
    ta[i] = p.ta, tb[i] = p.tb, m[i] = p.m, nn[i] = p.n, k[i] = p.k;
    lda[i] = p.lda, ldb[i] = p.ldb, ldc[i] = p.ldc;
    ptrs[i] = p.A, ptrs[n + i] = p.B, ptrs[2 * n + i] = p.C;
  }
  void** dev = engine.pointer_array(ptrs.size());
  check(cudaMemcpyAsync(dev, ptrs.data(), ptrs.size() * sizeof(void*), cudaMemcpyHostToDevice, ctx.stream),
        "linear_grouped: pointer upload");
  const void* const* inputs = dev;
  cublasStatus_t st = cublasGemmGroupedBatchedEx(
      ctx.blas, ta.data(), tb.data(), m.data(), nn.data(), k.data(), alpha.data(), inputs, CUDA_R_16BF,
      lda.data(), inputs + n, CUDA_R_16BF, ldb.data(), betas.data(), dev + 2 * n,
      fp32_out ? CUDA_R_32F : CUDA_R_16BF, ldc.data(), static_cast<int>(n), size.data(), CUBLAS_COMPUTE_32F);
  if (st == CUBLAS_STATUS_NOT_SUPPORTED || st == CUBLAS_STATUS_INVALID_VALUE) {
    for (const Gemm& p : gemms) gemm(ctx, p, fp32_out, beta, "linear_grouped(per group)");
  } else {
    check(st, "cublasGemmGroupedBatchedEx");
  }
}

void linear_forward_gathered(const Context& ctx, int64_t count, int64_t N, int64_t K, const bf16* const* x,
                             const bf16* const* W, bf16* const* y) {
  if (count <= 0 || N == 0 || K == 0) return;
  check_dims(count, N, K, "linear_forward_gathered: dimension above 2^31");
  const float alpha = 1.f, beta = 0.f;  // y_iᵀ[N, 1] = W_i[N, K] · x_iᵀ[K, 1]
  const int n = static_cast<int>(N), k = static_cast<int>(K);
  check(cublasGemmBatchedEx(ctx.blas, CUBLAS_OP_T, CUBLAS_OP_N, n, 1, k, &alpha,
                            reinterpret_cast<const void* const*>(W), CUDA_R_16BF, k,
                            reinterpret_cast<const void* const*>(x), CUDA_R_16BF, k, &beta,
                            reinterpret_cast<void* const*>(y), CUDA_R_16BF, n, static_cast<int>(count),
                            CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
        "linear_forward_gathered");
}

void linear_forward_strided(const Context& ctx, int64_t batch, int64_t M, int64_t N, int64_t K, const bf16* x,
                            int64_t x_stride, const bf16* W, int64_t W_stride, bf16* y, int64_t y_stride) {
  if (batch <= 0 || M == 0 || N == 0 || K == 0) return;
  check_dims(batch, M * N, K, "linear_forward_strided: dimension above 2^31");
  const float alpha = 1.f, beta = 0.f;  // y_bᵀ[N, M] = W_b[N, K] · x_bᵀ[K, M]
  const int m = static_cast<int>(M), n = static_cast<int>(N), k = static_cast<int>(K);
  check(cublasGemmStridedBatchedEx(ctx.blas, CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, &alpha, W, CUDA_R_16BF, k,
                                   W_stride, x, CUDA_R_16BF, k, x_stride, &beta, y, CUDA_R_16BF, n, y_stride,
                                   static_cast<int>(batch), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
        "linear_forward_strided");
}

ExpertForm expert_form(const Context& ctx, int64_t rows, int64_t top_k, int64_t num_experts) {
  return choose_expert_form(gemm_engine(ctx).options().experts, rows, top_k, num_experts);
}

}  // namespace mlpt::ref::cuda
