#include "backends/cpu/threads.hpp"

#include <sched.h>

#include <algorithm>
#include <mutex>

#include <cblas.h>
#if defined(_OPENMP)
#include <omp.h>
#endif

namespace mlpt::ref::cpu {

namespace {
std::mutex budget_mutex;
int train_held = 0;  // threads of the running train step, 0 when none
int blas_threads = 0;

void set_omp(int threads) {
#if defined(_OPENMP)
  omp_set_num_threads(threads);
#else
  (void)threads;
#endif
}
void set_blas_locked(int threads) {
  if (threads == blas_threads) return;
  openblas_set_num_threads(threads);
  blas_threads = threads;
}
}  // namespace

void set_cpu_threads(int threads) {
  if (threads <= 0) return;
  std::lock_guard lk(budget_mutex);
  set_blas_locked(threads);
  set_omp(threads);
}

int available_cores() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return 1;
  return std::max(1, CPU_COUNT(&set));
}

CoreLease::CoreLease(Phase phase, int want) : phase_(phase) {
  const int cores = available_cores();
  std::lock_guard lk(budget_mutex);
  if (phase == Phase::train) {
    threads_ = std::clamp(want, 1, cores);
    train_held = threads_;
    set_blas_locked(threads_);
  } else if (train_held > 0) {
    threads_ = std::max(1, cores - train_held);
  } else {
    threads_ = std::clamp(want, 1, cores);
    set_blas_locked(threads_);
  }
  set_omp(threads_);
}

CoreLease::~CoreLease() {
  if (phase_ != Phase::train) return;
  std::lock_guard lk(budget_mutex);
  train_held = 0;
}

}  // namespace mlpt::ref::cpu
