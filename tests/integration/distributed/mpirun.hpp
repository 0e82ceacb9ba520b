// Starts N processes with Open MPI's mpirun on this machine (as root too, more ranks than cores),
// bounded by `timeout` so a hung rank fails the test instead of hanging it.
#pragma once

#include <string>

#include "test_util.hpp"

namespace dist_test {

struct Launch {
  int status = -1;  // the shell's status: 0 when every rank exited 0
  std::string output;
};

inline Launch mpirun(int ranks, const std::string& command, int timeout_s = 300) {
  Launch l;
  l.output = mlpt_test::run_command("timeout -k 10 " + std::to_string(timeout_s) + " " + MPIRUN_EXE +
                                        " --allow-run-as-root --oversubscribe --bind-to none -np " + std::to_string(ranks) +
                                        " " + command + " 2>&1",
                                    &l.status);
  return l;
}

}  // namespace dist_test
