#include "core/dist/launcher.hpp"

#include <cstdlib>
#include <string>

namespace mlpt::dist {
namespace {

// The integer in environment variable `name`, or -1 when unset or not a number.
int env_int(const char* name) {
  const char* v = std::getenv(name);
  if (!v || !*v) return -1;
  char* end = nullptr;
  long n = std::strtol(v, &end, 10);
  return *end == '\0' && n >= 0 ? static_cast<int>(n) : -1;
}

}  // namespace

LaunchedProcess launched_process() {
  if (int size = env_int("OMPI_COMM_WORLD_SIZE"); size > 0) {
    const char* recovery = std::getenv("OMPI_MCA_orte_enable_recovery");  // what --enable-recovery sets
    const std::string on = recovery ? recovery : "";
    return {env_int("OMPI_COMM_WORLD_RANK"), size, "mpirun", on == "1" || on == "true"};
  }
  int rank = env_int("PMIX_RANK");
  if (rank < 0) rank = env_int("PMI_RANK");
  int size = env_int("PMI_SIZE");
  if (size < 0) size = env_int("SLURM_STEP_NUM_TASKS");
  if (rank >= 0 && size > 0) return {rank, size, "srun"};
  return {};
}

bool built_with_mpi() {
#ifdef MLPT_HAVE_MPI
  return true;
#else
  return false;
#endif
}

}  // namespace mlpt::dist
