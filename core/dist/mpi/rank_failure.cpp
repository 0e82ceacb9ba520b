#include "core/dist/mpi/rank_failure.hpp"

#include <cstdio>
#include <string>

#include "core/error.hpp"

namespace mlpt::dist {

RankEnd report_rank_failure(std::exception_ptr error, MpiChannel& channel, const Placement& placement, int rank,
                        const std::atomic<bool>& interrupted) {
  std::string what;
  try {
    std::rethrow_exception(error);
  } catch (const Error& e) {
    if (e.code() == MLPT_CANCELLED && interrupted.load()) return {130, false};  // Ctrl-C: every rank stops
    what = e.what();
  } catch (const std::exception& e) {
    what = e.what();
  }
  const std::string message = placement.describe(rank) + ": " + what;
  std::fprintf(stderr, "mlpt run: %s\n", message.c_str());
  try {
    channel.send(Placement::coordinator(), "failed", {{"message", message}});
  } catch (const Error&) {  // the coordinator is gone too: the message above is all there is
  }
  return {3, true};
}

}  // namespace mlpt::dist
