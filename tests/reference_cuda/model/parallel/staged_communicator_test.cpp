// StagedCommunicator's host logic (device buffers staged through the host for MPI; here the
// "device" is a simulated one, staged_communicator_check.cpp) over 2 and 3 MPI ranks.
#include <catch2/catch.hpp>

#include <string>

#include "mpirun_command.hpp"
#include "tests/support/test_util.hpp"

namespace {

void check_over(int ranks) {
  int status = 0;
  const std::string cmd =
      "timeout -k 5 120 " + mlpt_test::mpirun_command(ranks) + STAGED_COMMUNICATOR_CHECK + " 2>&1";
  const std::string out = mlpt_test::run_command(cmd, &status);
  INFO(cmd << "\n" << out);
  CHECK(status == 0);
  CHECK(out.find("staged communicator: ok over " + std::to_string(ranks) + " ranks") != std::string::npos);
}

}  // namespace

TEST_CASE("A staged communicator sums, exchanges, gathers and reduce-scatters through its staging, each buffer once each way") {
  check_over(2);
  check_over(3);
}
