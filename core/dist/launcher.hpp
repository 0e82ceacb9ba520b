// Which launcher started this process, read from the environment the launcher sets (no MPI call):
// Open MPI's mpirun (OMPI_COMM_WORLD_*), Slurm's srun with PMIx or PMI2 (PMIX_RANK / PMI_RANK with
// SLURM_STEP_NUM_TASKS / PMI_SIZE). A process started by hand is one process alone.
#pragma once

#include <string>

namespace mlpt::dist {

struct LaunchedProcess {
  int rank = 0;
  int world_size = 1;
  std::string launcher;  // "mpirun", "srun", or "" when started alone
  // mpirun --enable-recovery: the job outlives a rank that dies (a lost rollout worker does not end
  // the run), and mpirun then exits 0 whatever the ranks return (Open MPI 4.1).
  bool mpirun_recovery = false;
};

LaunchedProcess launched_process();

// True when this mlpt was built with MPI (core/dist/mpi/).
bool built_with_mpi();

}  // namespace mlpt::dist
