// The trainer component "qwen35_cuda" (mlpt/trainer.h): the device trainer
// (trainer/device_trainer.hpp, the same code the CPU tests run on the host platform) on one GPU.
// Settings: qwen35_cpu's plus "device" (CUDA ordinal, 0) and the library paths cuda_gemm and
// cuda_experts (device_model/backend_options.hpp); "threads" is accepted and unused.
// Exported weights are the fp32 masters as CUDA tensors (kDLCUDA, valid until the next step), or
// under model parallelism host copies of this rank's shards; states are interchangeable with
// qwen35_cpu's. Collectives over device buffers: NCCL where each rank of a group has a GPU of its
// own, else the group's MPI communicator through host copies
// (backends/cuda/parallel/device_communicator.hpp), so ranks may share a GPU.
#pragma once

#include <memory>
#include <string_view>

#include "device_model/backend_options.hpp"
#include "trainer/device_trainer.hpp"

namespace mlpt::ref::cuda {

class CudaTrainer final : public DeviceTrainer {
 public:
  explicit CudaTrainer(std::string_view config_json, const mlpt_component_group* group = nullptr);

 private:
  // The platform's settings, carried from the settings reader to the platform's maker.
  struct PlatformKeys {
    int device = 0;
    BackendOptions options;
  };
  CudaTrainer(std::string_view config_json, const mlpt_component_group* group,
              std::shared_ptr<PlatformKeys> keys);
};

}  // namespace mlpt::ref::cuda
