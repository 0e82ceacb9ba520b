// The MPI communicator of a component group (an engine or a trainer group, engine.h / trainer.h
// "groups") whose ranks are processes of one MPI job, placed anywhere in MPI_COMM_WORLD: the ranks
// meet through the host's key-value store, so the group needs nothing from the other processes.
// Built only where MPI is found (MLPT_REFERENCE_MODEL_MPI).
#pragma once

#include <string>

namespace mlpt::ref {

// Collective over the group's `size` ranks (this one `rank`): each puts its world rank under
// "<name>/world_rank/<rank>", reads the others' (waiting minutes at most: the ranks of a group
// start within minutes of each other), and they create a communicator of their own, its ranks in
// group order, errors returned (not aborting). Returns it as an MPI_Comm the caller frees. `tag`
// tells apart groups created at once; `what` ("engine group") names it in errors, which throw
// MLPT_FAILED_PRECONDITION when the process was not started by an MPI launcher, MLPT_UNAVAILABLE
// when an MPI call fails.
void* meet_mpi_group(const std::string& what, const std::string& name, int rank, int size, int tag);

}  // namespace mlpt::ref
