#include "model/parallel/mpi_group.hpp"

#include <mpi.h>

#include <vector>

#include "mlpt/sdk/mpi_status.hpp"
#include "mlpt/sdk/plugin.hpp"

namespace mlpt::ref {

namespace {
constexpr int64_t kMeetingTimeoutMs = 600000;
}  // namespace

void* meet_mpi_group(const std::string& what, const std::string& name, int rank, int size, int tag) {
  const std::string group = what + " '" + name + "'";
  int initialised = 0;
  MPI_Initialized(&initialised);
  if (!initialised)
    throw sdk::Error(MLPT_FAILED_PRECONDITION, group + " of " + std::to_string(size) +
                                                  " ranks needs MPI, and this process was not started by an MPI launcher (mpirun, srun)");
  auto check = [&](int rc, const char* call) { sdk::check_mpi<sdk::Error>(rc, group + ": " + call); };
  int world_rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  const std::string key = name + "/world_rank/";
  sdk::kv_put(what, key + std::to_string(rank), std::to_string(world_rank));
  std::vector<int> members(static_cast<size_t>(size));
  for (int r = 0; r < size; ++r)
    members[static_cast<size_t>(r)] = std::stoi(sdk::kv_get(what, key + std::to_string(r), kMeetingTimeoutMs));
  MPI_Group world, ranks;
  check(MPI_Comm_group(MPI_COMM_WORLD, &world), "MPI_Comm_group");
  check(MPI_Group_incl(world, size, members.data(), &ranks), "MPI_Group_incl");
  MPI_Comm comm = MPI_COMM_NULL;
  const int rc = MPI_Comm_create_group(MPI_COMM_WORLD, ranks, tag, &comm);  // the group's ranks only
  MPI_Group_free(&ranks);
  MPI_Group_free(&world);
  check(rc, "MPI_Comm_create_group");
  MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
  return static_cast<void*>(comm);
}

}  // namespace mlpt::ref
