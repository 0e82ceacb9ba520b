#include "core/dist/mpi/session.hpp"

#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/error.hpp"

namespace mlpt::dist {

MpiSession::MpiSession() {
  int initialised = 0;
  MPI_Initialized(&initialised);
  if (initialised) throw Error(MLPT_FAILED_PRECONDITION, "MPI: initialised twice in one process");
  int provided = 0;
  if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS)
    throw Error(MLPT_UNAVAILABLE, "MPI_Init_thread failed (is this process started by mpirun or srun?)");
  if (provided < MPI_THREAD_MULTIPLE) {
    MPI_Finalize();
    throw Error(MLPT_UNIMPLEMENTED, "MPI: this library gives thread level " + std::to_string(provided) +
                                        "; mlpt needs MPI_THREAD_MULTIPLE (" + std::to_string(MPI_THREAD_MULTIPLE) + ")");
  }
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size_);
  // Errors come back as codes and become mlpt::Error with the call named, never an abort in MPI.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
}

MpiSession::~MpiSession() { MPI_Finalize(); }

void MpiSession::abort_job(int exit_code) {
  MPI_Abort(MPI_COMM_WORLD, exit_code);
  std::_Exit(exit_code);
}

void MpiSession::leave_job(int exit_code) {
  std::fflush(nullptr);
  std::_Exit(exit_code);
}

}  // namespace mlpt::dist
