// How tests and benchmarks start N processes with Open MPI's mpirun on this machine: as root too
// (--allow-run-as-root), more ranks than cores (--oversubscribe), no core binding (the ranks share
// the few cores), optionally --enable-recovery (the job outlives a rank that dies, as a run that
// must survive a lost rollout worker is launched) and environment variables passed on to every
// rank. MPIRUN_EXE is the mpirun CMake found (mlpt_use_mpirun, cmake/MlptMpirun.cmake).
#pragma once

#include <sys/stat.h>
#include <unistd.h>

#include <string>
#include <vector>

namespace mlpt_test {

struct MpirunOptions {
  bool recovery = false;              // --enable-recovery
  std::vector<std::string> exported;  // -x NAME: passed on from the caller's environment
};

// Where this test process's mpirun jobs keep their session folders. Open MPI's default,
// /tmp/ompi.HOST.UID, is shared by every job of the user, and one job removing it as it ends while
// another creates it fails the second ("A call to mkdir was unable to create the desired
// directory ... File exists"): tests that run side by side (ctest -j) each get their own.
inline std::string mpirun_session_base() {
  static const std::string base = [] {
    const std::string dir = "/tmp/mlpt-ompi-" + std::to_string(::getpid());
    ::mkdir(dir.c_str(), 0700);
    return dir;
  }();
  return base;
}

// "mpirun ... -np N " followed by the command the caller appends.
inline std::string mpirun_command(int ranks, const MpirunOptions& options = {}) {
  std::string line = std::string(MPIRUN_EXE) + " --allow-run-as-root --oversubscribe --bind-to none --mca orte_tmpdir_base " +
                     mpirun_session_base();
  if (options.recovery) line += " --enable-recovery";
  for (const auto& name : options.exported) line += " -x " + name;
  return line + " -np " + std::to_string(ranks) + " ";
}

}  // namespace mlpt_test
