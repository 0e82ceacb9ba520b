// The CUDA side of a StagedCommunicator (model/parallel/staged_communicator.hpp): device buffers
// copied to host memory and back on the model's stream, so an MPI communicator can carry the CUDA
// model's collectives (two ranks on one GPU, or no NCCL). Copies wait for the work enqueued on the
// stream before them; a copy back returns once it has landed, so the host buffer may be reused.
#pragma once

#include <cuda_runtime_api.h>

#include <memory>

#include "model/parallel/staged_communicator.hpp"

namespace mlpt::ref::cuda {

class HostStaging final : public Staging {
 public:
  explicit HostStaging(cudaStream_t stream) : stream_(stream) {}
  void to_host(float* host, const float* device, size_t count) override;
  void to_buffer(float* device, const float* host, size_t count) override;

 private:
  cudaStream_t stream_;
};

// `host_group` (e.g. an MpiCommunicator; must outlive the result) carrying device buffers of
// the current device, staged through the host on `stream`.
std::unique_ptr<Communicator> host_staged_communicator(Communicator& host_group, cudaStream_t stream);

}  // namespace mlpt::ref::cuda
