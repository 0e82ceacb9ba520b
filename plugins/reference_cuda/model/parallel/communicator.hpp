// The collectives model parallelism needs, over one group of ranks (a tensor-parallel or an
// expert-parallel group), independent of the transport: MPI between CPU processes
// (mpi_communicator.hpp), NCCL between GPUs behind the same calls (backends/cuda/parallel/nccl_communicator.hpp).
//
// Buffers are float arrays in the memory the implementation works on: host memory for MPI; for an
// NCCL implementation, device memory, the calls enqueued on the stream the communicator was made
// with (ncclAllReduce; ncclGroupStart + ncclSend/ncclRecv per peer for the -v calls). Counts are
// always host arrays, one entry per rank of the group, in floats; the data of rank r is packed
// contiguously in rank order (displacements are the prefix sums of the counts).
//
// Every call is collective: every rank of the group makes the same calls in the same order, with
// counts that agree (rank a's send_counts[b] == rank b's recv_counts[a]). A failure throws
// mlpt::sdk::Error(MLPT_UNAVAILABLE) naming the call; the group is unusable afterwards.
#pragma once

#include <cstddef>

namespace mlpt::ref {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // values[i] = Σ over ranks of values[i], in place; every rank gets the same bits.
  virtual void all_reduce_sum(float* values, size_t count) = 0;

  // Rank r sends send_counts[p] floats to each rank p and receives recv_counts[p] from each.
  virtual void all_to_all_v(const float* send, const size_t* send_counts, float* recv, const size_t* recv_counts) = 0;

  // recv = the concatenation of every rank's `send`, rank r contributing recv_counts[r] floats
  // (== its send_count).
  virtual void all_gather_v(const float* send, size_t send_count, float* recv, const size_t* recv_counts) = 0;

  // The data-parallel gradient sum of a distributed optimizer: every rank passes `send` of
  // Σ recv_counts floats, rank p's block at the prefix sum of the counts before p; this rank r
  // receives in `recv` (recv_counts[r] floats, not overlapping `send`) its block of the
  // element-wise sum over the ranks. Each element is summed on one rank only, so no agreement
  // between ranks is needed. A communicator without it throws MLPT_UNIMPLEMENTED.
  virtual void reduce_scatter_v(const float* send, float* recv, const size_t* recv_counts);

  // recv_counts[p] = what rank p passed as send_counts[r] (this rank r): the sizes an all_to_all_v
  // will deliver, known before the buffers are allocated. Host memory for every implementation.
  virtual void exchange_counts(const size_t* send_counts, size_t* recv_counts) = 0;

  // Point to point (pipeline stages): `count` floats to rank `peer`, or from it; the peer makes the
  // matching call with the same count, and messages between two ranks arrive in the order sent.
  // send_recv sends to `to` and receives from `from` at once, so two stages that each send to the
  // other cannot wait for each other. Not collective. A communicator without them throws
  // MLPT_UNIMPLEMENTED.
  virtual void send(const float* values, size_t count, int peer);
  virtual void recv(float* values, size_t count, int peer);
  virtual void send_recv(const float* send, size_t send_count, int to, float* recv, size_t recv_count, int from);
};

}  // namespace mlpt::ref
