// A small register-tiled matrix product for the sequence ops' in-chunk / in-block products
// (tiles of 64, strided rows): C += alpha * A B, all row-major with leading dimensions. The
// register tile uses GCC/Clang vector extensions; each C element sums over k in increasing order
// whatever the tile, so results do not depend on tiling or threads. Internal to backends/cpu.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>

namespace mlpt::ref::cpu::detail {

// One tile of up to MR rows x one 32-byte vector of columns (nr <= NR valid), kept in registers
// across the whole k loop.
template <class T, int64_t MR, bool kFullRows, bool kFullCols>
inline void gemm_tile(int64_t mr, int64_t nr, int64_t K, T alpha, const T* A, int64_t lda, const T* B,
                      int64_t ldb, T* C, int64_t ldc) {
  typedef T V __attribute__((vector_size(32)));
  const int64_t rows = kFullRows ? MR : mr;
  V acc[MR] = {};
  for (int64_t k = 0; k < K; ++k) {
    V b = {};
    if constexpr (kFullCols)
      std::memcpy(&b, B + k * ldb, sizeof(V));
    else
      for (int64_t c = 0; c < nr; ++c) b[c] = B[k * ldb + c];
    for (int64_t r = 0; r < rows; ++r) acc[r] += A[r * lda + k] * b;
  }
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < nr; ++c) C[r * ldc + c] += alpha * acc[r][c];
}

// C[i][j] += alpha * sum_k A[i*lda + k] * B[k*ldb + j], for i < M, j < N, k < K.
template <class T>
inline void gemm_acc(int64_t M, int64_t N, int64_t K, T alpha, const T* A, int64_t lda, const T* B,
                     int64_t ldb, T* C, int64_t ldc) {
  constexpr int64_t MR = 4, NR = 32 / static_cast<int64_t>(sizeof(T));  // 8 float / 4 double
  for (int64_t i0 = 0; i0 < M; i0 += MR) {
    const int64_t mr = std::min(MR, M - i0);
    for (int64_t j0 = 0; j0 < N; j0 += NR) {
      const int64_t nr = std::min(NR, N - j0);
      const T* a = A + i0 * lda;
      T* c = C + i0 * ldc + j0;
      if (mr == MR && nr == NR)
        gemm_tile<T, MR, true, true>(mr, nr, K, alpha, a, lda, B + j0, ldb, c, ldc);
      else if (nr == NR)
        gemm_tile<T, MR, false, true>(mr, nr, K, alpha, a, lda, B + j0, ldb, c, ldc);
      else
        gemm_tile<T, MR, false, false>(mr, nr, K, alpha, a, lda, B + j0, ldb, c, ldc);
    }
  }
}

}  // namespace mlpt::ref::cpu::detail
