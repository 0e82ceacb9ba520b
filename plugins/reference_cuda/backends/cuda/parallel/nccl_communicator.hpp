// The Communicator (model/parallel/communicator.hpp) between GPUs, over NCCL: the same calls the
// MPI implementation serves between CPU processes, so the model-parallel forward and backward run
// unchanged on the CUDA backend. Buffers are device memory; every call is enqueued on the stream
// the communicator was made with and returns before it completes (exchange_counts, whose answer the
// caller needs on the host, waits for its own result). Built only where NCCL is found
// (MLPT_HAVE_NCCL).
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <array>

#include "model/parallel/communicator.hpp"

namespace mlpt::ref::cuda {

class NcclCommunicator final : public Communicator {
 public:
  // The identity every rank of one group passes to its constructor: rank 0 makes it and shares it
  // (e.g. over the host's key-value store or MPI) before the ranks construct.
  using Id = std::array<char, sizeof(ncclUniqueId)>;
  static Id new_id();

  // Collective over the `size` ranks passing the same `id`; blocks until they all have joined.
  // The current CUDA device is this rank's GPU (one GPU per rank: NCCL refuses two ranks of one
  // group on one device).
  NcclCommunicator(const Id& id, int rank, int size, cudaStream_t stream);
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void all_reduce_sum(float* values, size_t count) override;
  void all_to_all_v(const float* send, const size_t* send_counts, float* recv, const size_t* recv_counts) override;
  void all_gather_v(const float* send, size_t send_count, float* recv, const size_t* recv_counts) override;
  // ncclReduceScatter when every rank's block is the same size, else one ncclReduce per receiving
  // rank in one group call.
  void reduce_scatter_v(const float* send, float* recv, const size_t* recv_counts) override;
  void exchange_counts(const size_t* send_counts, size_t* recv_counts) override;
  // Enqueued on the stream like the collectives (ncclSend/ncclRecv, both in one group call for
  // send_recv).
  void send(const float* values, size_t count, int peer) override;
  void recv(float* values, size_t count, int peer) override;
  void send_recv(const float* send, size_t send_count, int to, float* recv, size_t recv_count, int from) override;

 private:
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_;
  int rank_, size_;
  void* counts_ = nullptr;  // device scratch for exchange_counts: 2 · size uint64 values
};

}  // namespace mlpt::ref::cuda
