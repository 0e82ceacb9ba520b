// The Communicator over an MPI communicator (CPU processes started by mpirun or srun), and the
// tp × ep layout of MPI_COMM_WORLD a sharded forward runs on. Built only where MPI is found
// (MLPT_REFERENCE_MODEL_MPI); without it a layout of more than one rank is refused.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "model/parallel/communicator.hpp"
#include "model/parallel/model_parallel.hpp"

namespace mlpt::ref {

class GroupFailure;

// values[i] = the sum over the ranks of `comm` (an MPI_Comm), in place, the same bits on every rank
// for any group size: rank 0 reduces, then broadcasts its result (MPI_Allreduce only advises
// implementations to give every rank the same bits). Collective over `comm`; float or double.
// With `failure` its waits give up when a rank of the group fails (group_failure.hpp).
template <class T>
void sum_on_every_rank(void* comm, T* values, size_t count, GroupFailure* failure = nullptr);

class MpiCommunicator final : public Communicator {
 public:
  // Takes ownership of `comm` (an MPI_Comm, freed by the destructor); errors return, not abort.
  // With `failure` (not owned; it outlives this) every call waits through it: a rank of the group
  // that fails meanwhile makes it throw MLPT_UNAVAILABLE naming that rank instead of waiting forever.
  explicit MpiCommunicator(void* comm, GroupFailure* failure = nullptr);
  ~MpiCommunicator() override;
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void all_reduce_sum(float* values, size_t count) override;
  void all_to_all_v(const float* send, const size_t* send_counts, float* recv, const size_t* recv_counts) override;
  void all_gather_v(const float* send, size_t send_count, float* recv, const size_t* recv_counts) override;
  void reduce_scatter_v(const float* send, float* recv, const size_t* recv_counts) override;
  void exchange_counts(const size_t* send_counts, size_t* recv_counts) override;
  void send(const float* values, size_t count, int peer) override;
  void recv(float* values, size_t count, int peer) override;
  void send_recv(const float* send, size_t send_count, int to, float* recv, size_t recv_count, int from) override;

 private:
  void* comm_;
  GroupFailure* failure_;
  int rank_ = 0, size_ = 1;
};

// MPI_COMM_WORLD as a tp × ep × pp layout: initialises MPI when the process has not (and then
// finalises it in the destructor), checks that the world has tp · ep · pp ranks, and splits it
// into this rank's tensor-parallel, expert-parallel and pipeline groups (model_parallel.hpp places
// the ranks; world rank = model rank).
class MpiModelLayout {
 public:
  MpiModelLayout(int tp, int ep, int etp = 1, int pp = 1);  // etp: expert tensor parallelism, 1 or tp
  ~MpiModelLayout();
  MpiModelLayout(const MpiModelLayout&) = delete;
  MpiModelLayout& operator=(const MpiModelLayout&) = delete;

  const ModelShard& shard() const { return shard_; }
  const ModelParallel& groups() const { return groups_; }
  int world_rank() const { return shard_.model_rank(); }

  // World rank 0's `line` (and whether it has one) on every rank: rank 0 reads input, all compute.
  bool broadcast_line(std::string& line, bool have) const;
  // Ends every rank of the job (one rank's error must not leave the others waiting in a collective).
  [[noreturn]] void abort(int status) const;

 private:
  bool finalize_ = false;
  ModelShard shard_;
  std::unique_ptr<MpiCommunicator> tensor_, expert_, routed_, pipeline_;
  ModelParallel groups_;
};

}  // namespace mlpt::ref
