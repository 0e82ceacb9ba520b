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
};

LaunchedProcess launched_process();

// True when this mlpt was built with MPI (core/dist/mpi/).
bool built_with_mpi();

}  // namespace mlpt::dist
