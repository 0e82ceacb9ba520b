#include "backends/cpu/threads.hpp"

#include <cblas.h>
#if defined(_OPENMP)
#include <omp.h>
#endif

namespace mlpt::ref::cpu {

void set_cpu_threads(int threads) {
  if (threads <= 0) return;
  openblas_set_num_threads(threads);
#if defined(_OPENMP)
  omp_set_num_threads(threads);
#endif
}

}  // namespace mlpt::ref::cpu
