// A Communicator whose buffers live in another memory (a GPU's) than the one its host group
// works on (MPI, host memory): each call copies its inputs out through `Staging`, runs the host
// group's call on host buffers, and copies the results back in. It lets ranks that share a
// device (NCCL refuses two ranks of one group on one GPU) or have no NCCL run the device model's
// collectives over MPI, at the price of two copies per call; ranks with a GPU each use NCCL
// (backends/cuda/parallel/nccl_communicator.hpp). The CUDA staging is
// backends/cuda/parallel/host_staging.hpp.
//
// Every call is collective over the host group, as the Communicator contract says, and returns once
// its results are in the caller's buffers (Staging::to_buffer returns when they are written).
// Counts are host arrays, as for every Communicator.
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "model/parallel/communicator.hpp"

namespace mlpt::ref {

// Copies between the staged buffers' memory and host memory (the host side is always ordinary
// memory). to_host returns once `host` holds the values (it waits for earlier work on the buffer).
class Staging {
 public:
  virtual ~Staging() = default;
  virtual void to_host(float* host, const float* buffer, size_t count) = 0;
  virtual void to_buffer(float* buffer, const float* host, size_t count) = 0;
};

class StagedCommunicator final : public Communicator {
 public:
  // `host_group` must outlive this communicator; `staging` is owned.
  StagedCommunicator(Communicator& host_group, std::unique_ptr<Staging> staging);

  int rank() const override { return host_.rank(); }
  int size() const override { return host_.size(); }
  void all_reduce_sum(float* values, size_t count) override;
  void all_to_all_v(const float* send, const size_t* send_counts, float* recv, const size_t* recv_counts) override;
  void all_gather_v(const float* send, size_t send_count, float* recv, const size_t* recv_counts) override;
  void reduce_scatter_v(const float* send, float* recv, const size_t* recv_counts) override;
  void exchange_counts(const size_t* send_counts, size_t* recv_counts) override;
  void send(const float* values, size_t count, int peer) override;
  void recv(float* values, size_t count, int peer) override;
  void send_recv(const float* send, size_t send_count, int to, float* recv, size_t recv_count, int from) override;

 private:
  size_t total(const size_t* counts) const;

  Communicator& host_;
  std::unique_ptr<Staging> staging_;
  std::vector<float> send_, recv_;  // host copies, grown as needed
};

}  // namespace mlpt::ref
