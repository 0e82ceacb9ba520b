// How a trainer rank or rollout worker ends on an error: it prints the error naming itself and tells
// the coordinator, which stops the run (a trainer rank) or drops the worker and back-fills its
// episodes (a rollout worker that was serving). Ctrl-C is no failure: every rank stops on its own.
#pragma once

#include <atomic>
#include <exception>

#include "core/dist/mpi/channel.hpp"
#include "core/dist/placement.hpp"

namespace mlpt::dist {

// Call from a catch block with the caught `error`; returns the rank's exit status (3 failed, 130
// interrupted).
int report_rank_failure(std::exception_ptr error, MpiChannel& channel, const Placement& placement, int rank,
                        const std::atomic<bool>& interrupted);

}  // namespace mlpt::dist
