// How a trainer rank or rollout worker ends on an error: it prints the error naming itself and tells
// the coordinator, which stops the run (a trainer rank) or drops the worker and back-fills its
// episodes (a rollout worker that was serving). Ctrl-C is no failure: every rank stops on its own.
#pragma once

#include <atomic>
#include <exception>

#include "core/dist/mpi/channel.hpp"
#include "core/dist/placement.hpp"

namespace mlpt::dist {

// How a trainer rank or rollout worker ended: its exit status, and whether the coordinator said it
// ends the job with MPI_Abort (it lost a rank; "stop" with "abort_job"), so this rank must leave
// without MPI_Finalize: a finalize would wait for the lost rank and the aborted coordinator forever.
struct RankEnd {
  int exit_code = 0;
  bool job_aborted = false;
};

// Call from a catch block with the caught `error`; returns the rank's exit status (3 failed, 130
// interrupted).
int report_rank_failure(std::exception_ptr error, MpiChannel& channel, const Placement& placement, int rank,
                        const std::atomic<bool>& interrupted);

}  // namespace mlpt::dist
