// The communicator a CUDA model's tensor-parallel group computes with (model/parallel/
// communicator.hpp, device buffers ordered on one stream), made from the group's MPI communicator
// (host memory): NCCL where every rank of the group has a GPU of its own (their device UUIDs all
// differ) and the plugin is built with NCCL (MLPT_REFERENCE_NCCL); otherwise the MPI communicator
// itself, device buffers staged through the host (host_staging.hpp): ranks that share a GPU (NCCL
// refuses two ranks of one group on one device) or a build without NCCL.
#pragma once

#include <cuda_runtime_api.h>

#include <memory>
#include <string>

#include "model/parallel/communicator.hpp"

namespace mlpt::ref::cuda {

struct DeviceCommunicator {
  std::unique_ptr<Communicator> group;
  std::string kind;  // "nccl" or "staged" (for logs and errors)
};

// Collective over `host_group` (every rank calls it, each with its own GPU current); `host_group`
// must outlive the result. `stream` is the one the model's ops run on.
DeviceCommunicator device_communicator(Communicator& host_group, cudaStream_t stream);

}  // namespace mlpt::ref::cuda
