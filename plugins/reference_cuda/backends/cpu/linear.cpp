#include "backends/cpu/linear.hpp"

#include <cblas.h>

#include <algorithm>

namespace mlpt::ref::cpu {

namespace {
void gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
          const float* B, int64_t ldb, float beta, float* C) {
  cblas_sgemm(CblasRowMajor, ta, tb, M, N, K, 1.0f, A, lda, B, ldb, beta, C, N);
}
void gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int64_t M, int64_t N, int64_t K, const double* A, int64_t lda,
          const double* B, int64_t ldb, double beta, double* C) {
  cblas_dgemm(CblasRowMajor, ta, tb, M, N, K, 1.0, A, lda, B, ldb, beta, C, N);
}
// y[N] = W[N,K] · x[K] (+ beta y): one row through W, the memory-bound decode product at batch 1.
void gemv(int64_t N, int64_t K, const float* W, const float* x, float beta, float* y) {
  cblas_sgemv(CblasRowMajor, CblasNoTrans, N, K, 1.0f, W, K, x, 1, beta, y, 1);
}
void gemv(int64_t N, int64_t K, const double* W, const double* x, double beta, double* y) {
  cblas_dgemv(CblasRowMajor, CblasNoTrans, N, K, 1.0, W, K, x, 1, beta, y, 1);
}
}  // namespace

template <class T>
void linear_forward(int64_t M, int64_t N, int64_t K, const T* x, const T* W, T* y, bool accumulate) {
  if (M == 0 || N == 0) return;
  if (K == 0) {
    if (!accumulate)
      for (int64_t i = 0; i < M * N; ++i) y[i] = T(0);
    return;
  }
  if (M == 1) {  // a single row (decode at batch 1): GEMV streams W once, without GEMM's packing
    if (!accumulate) std::fill(y, y + N, T(0));  // OpenBLAS scales y by beta = 0: NaN would stay
    gemv(N, K, W, x, T(1), y);
  } else {
    gemm(CblasNoTrans, CblasTrans, M, N, K, x, K, W, K, accumulate ? T(1) : T(0), y);
  }
}

template <class T>
void linear_backward_input(int64_t M, int64_t N, int64_t K, const T* dy, const T* W, T* dx, bool accumulate) {
  if (M == 0 || K == 0) return;
  if (N == 0) {
    if (!accumulate)
      for (int64_t i = 0; i < M * K; ++i) dx[i] = T(0);
    return;
  }
  gemm(CblasNoTrans, CblasNoTrans, M, K, N, dy, N, W, K, accumulate ? T(1) : T(0), dx);
}

template <class T>
void linear_backward_weight(int64_t M, int64_t N, int64_t K, const T* dy, const T* x, T* dW) {
  if (M == 0 || N == 0 || K == 0) return;
  gemm(CblasTrans, CblasNoTrans, N, K, M, dy, N, x, K, T(1), dW);
}

template void linear_forward<float>(int64_t, int64_t, int64_t, const float*, const float*, float*, bool);
template void linear_forward<double>(int64_t, int64_t, int64_t, const double*, const double*, double*, bool);
template void linear_backward_input<float>(int64_t, int64_t, int64_t, const float*, const float*, float*, bool);
template void linear_backward_input<double>(int64_t, int64_t, int64_t, const double*, const double*, double*, bool);
template void linear_backward_weight<float>(int64_t, int64_t, int64_t, const float*, const float*, float*);
template void linear_backward_weight<double>(int64_t, int64_t, int64_t, const double*, const double*, double*);

}  // namespace mlpt::ref::cpu
