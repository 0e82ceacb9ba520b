// Bias-free linear layers through BLAS (OpenBLAS sgemm/dgemm), weights in PyTorch's [out, in]
// layout. CPU reference backend; T is float or double.
#pragma once

#include <cstdint>

namespace mlpt::ref::cpu {

// y[M,N] (+)= x[M,K] · W[N,K]^T
template <class T>
void linear_forward(int64_t M, int64_t N, int64_t K, const T* x, const T* W, T* y, bool accumulate = false);

// dx[M,K] (+)= dy[M,N] · W[N,K]
template <class T>
void linear_backward_input(int64_t M, int64_t N, int64_t K, const T* dy, const T* W, T* dx, bool accumulate);

// dW[N,K] += dy[M,N]^T · x[M,K]
template <class T>
void linear_backward_weight(int64_t M, int64_t N, int64_t K, const T* dy, const T* x, T* dW);

}  // namespace mlpt::ref::cpu
