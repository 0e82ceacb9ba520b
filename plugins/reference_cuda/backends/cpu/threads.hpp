// How many threads the CPU backend uses: BLAS (process-wide in OpenBLAS) and, when the sequence
// ops are built with OpenMP, their parallel loops (a count per calling thread). Oversubscribing a
// loaded machine with spinning OpenMP and BLAS workers costs far more than it gains.
//
// One core budget for the process, split by phase. The trainer and the engine live in one process
// (one plugin) and run at the same time in the asynchronous loop; each used to set every count to
// its own "threads", so together they asked for twice the cores (and OpenBLAS's count, being
// process-wide, was whichever set it last). Now a train step holds a lease for its threads (at
// most the cores the process may run on), and an engine step gets what a running train step
// leaves, at least one thread; OpenBLAS follows the train step while one runs (its GEMMs are the
// large ones), else the engine's step.
#pragma once

namespace mlpt::ref::cpu {

// Sets both counts for tools and benchmarks that run alone.
void set_cpu_threads(int threads);

// The cores this process may run on (its CPU affinity).
int available_cores();

enum class Phase { train, generate };

class CoreLease {
 public:
  CoreLease(Phase phase, int want);  // sets the calling thread's OpenMP count (and BLAS's)
  ~CoreLease();
  CoreLease(const CoreLease&) = delete;
  CoreLease& operator=(const CoreLease&) = delete;
  int threads() const { return threads_; }

 private:
  Phase phase_;
  int threads_;
};

}  // namespace mlpt::ref::cpu
