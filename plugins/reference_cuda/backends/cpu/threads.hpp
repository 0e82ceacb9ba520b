// How many threads the CPU backend uses: BLAS (process-wide in OpenBLAS) and, when the sequence
// ops are built with OpenMP, their parallel loops. Components set it from their "threads" setting;
// oversubscribing a loaded machine with spinning OpenMP workers costs far more than it gains.
#pragma once

namespace mlpt::ref::cpu {

void set_cpu_threads(int threads);

}  // namespace mlpt::ref::cpu
