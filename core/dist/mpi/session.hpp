// The MPI library's lifetime in a process started by a launcher (mpirun, or srun with PMIx): one
// per process, made before anything uses MPI and destroyed last. Built only with MPI (core/dist/mpi/).
#pragma once

namespace mlpt::dist {

class MpiSession {
 public:
  // MPI_Init_thread asking for MPI_THREAD_MULTIPLE: plugins (the trainer's gradient sum) and the
  // rendezvous' store keeper call MPI from their own threads. Throws naming the level it got.
  MpiSession();
  ~MpiSession();
  MpiSession(const MpiSession&) = delete;
  MpiSession& operator=(const MpiSession&) = delete;

  int rank() const { return rank_; }
  int world_size() const { return world_size_; }

  // Ends every process of the job at once (MPI_Abort): for a failure the others cannot see.
  [[noreturn]] static void abort_job(int exit_code);
  // Ends this process without MPI_Finalize, which would wait for every rank: for every rank of a job
  // that lost one, under mpirun --enable-recovery (where neither the lost rank nor abort_job ends
  // the job, and the others would wait in MPI_Finalize forever).
  [[noreturn]] static void leave_job(int exit_code);

 private:
  int rank_ = 0, world_size_ = 1;
};

}  // namespace mlpt::dist
