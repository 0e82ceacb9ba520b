// `mlpt run` started as several processes by a launcher (`mpirun -np N mlpt run CONFIG`, srun):
// every process makes the MPI session, the run's key-value store (rendezvous.hpp) and message
// channel, reads [placement], and runs its part. The coordinator (rank 0) runs the benchmark loop
// (run/benchmark_run.hpp) with its episodes on the rollout workers and its steps on the trainer
// group (coordinator.hpp); the trainer ranks and rollout workers run their own loops until it
// says stop.
#pragma once

#include <memory>

#include "core/dist/mpi/session.hpp"
#include "core/run/benchmark_run.hpp"

namespace mlpt::dist {

struct DistributedOutcome {
  bool coordinator = false;  // this process ran the loop: `summary` is the run's
  run::RunSummary summary;
  int exit_code = 0;         // of a trainer rank or rollout worker: 0 stopped, 3 failed
  // Of the coordinator: a trainer rank failed or did not answer in time. It may never finish MPI
  // with the others, so the coordinator ends the job with mpi->abort_job once the run is reported.
  bool end_job = false;
  // Some rank is lost (that, or a rollout worker that failed, died or went silent; of another rank:
  // "stop" said so, or this rank failed). Under mpirun --enable-recovery, where neither a dead rank
  // nor MPI_Abort ends the job, every rank leaves with mpi->leave_job: MPI_Finalize would wait for
  // the lost rank forever.
  bool rank_lost = false;
  std::unique_ptr<MpiSession> mpi;  // MPI_Finalize when the outcome goes
};

DistributedOutcome run_distributed(const run::RunConfig& config, const run::RunOptions& options);

}  // namespace mlpt::dist
