// How a trainer rank or rollout worker ends on an error: it prints the error naming itself and tells
// the coordinator, which stops the run (a trainer rank) or drops the worker and back-fills its
// episodes (a rollout worker that was serving). Ctrl-C is no failure: every rank stops on its own.
#pragma once

#include <atomic>
#include <exception>

#include "core/dist/mpi/channel.hpp"
#include "core/dist/placement.hpp"

namespace mlpt::dist {

// How a trainer rank or rollout worker ended: its exit status, and whether some rank of the job is
// lost (this one failed, or "stop" said so: a rank failed, hung or died). Then, under mpirun
// --enable-recovery, this rank must leave without MPI_Finalize, which would wait for the lost rank
// forever (without recovery, a rank that dies ends the whole job, and the others can finalize).
struct RankEnd {
  int exit_code = 0;
  bool rank_lost = false;
};

// Call from a catch block with the caught `error`: exit status 3 and rank_lost (the coordinator
// drops this rank or fails the run), or 130 when interrupted (Ctrl-C: every rank stops).
RankEnd report_rank_failure(std::exception_ptr error, MpiChannel& channel, const Placement& placement, int rank,
                        const std::atomic<bool>& interrupted);

}  // namespace mlpt::dist
