#include "backends/cuda/parallel/host_staging.hpp"

#include "backends/cuda/context.hpp"

namespace mlpt::ref::cuda {

void HostStaging::to_host(float* host, const float* device, size_t count) {
  if (count == 0) return;
  check(cudaMemcpyAsync(host, device, count * sizeof(float), cudaMemcpyDeviceToHost, stream_),
        "staged communicator: device to host");
  check(cudaStreamSynchronize(stream_), "staged communicator: device to host");
}

void HostStaging::to_buffer(float* device, const float* host, size_t count) {
  if (count == 0) return;
  check(cudaMemcpyAsync(device, host, count * sizeof(float), cudaMemcpyHostToDevice, stream_),
        "staged communicator: host to device");
  check(cudaStreamSynchronize(stream_), "staged communicator: host to device");  // the host copy is reused
}

std::unique_ptr<Communicator> host_staged_communicator(Communicator& host_group, cudaStream_t stream) {
  return std::make_unique<StagedCommunicator>(host_group, std::make_unique<HostStaging>(stream));
}

}  // namespace mlpt::ref::cuda
