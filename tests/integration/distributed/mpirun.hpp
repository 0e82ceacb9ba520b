// Starts N processes with Open MPI's mpirun on this machine (as root too, more ranks than cores),
// bounded by `timeout` so a hung rank fails the test instead of hanging it.
#pragma once

#include <string>

#include "mpirun_command.hpp"  // tests/support
#include "tests/support/test_util.hpp"

namespace dist_test {

struct Launch {
  int status = -1;  // the shell's status: 0 when every rank exited 0
  std::string output;
};

inline Launch mpirun(int ranks, const std::string& command, int timeout_s = 300) {
  Launch l;
  l.output = mlpt_test::run_command("timeout -k 10 " + std::to_string(timeout_s) + " " +
                                        mlpt_test::mpirun_command(ranks) + command + " 2>&1",
                                    &l.status);
  return l;
}

}  // namespace dist_test
