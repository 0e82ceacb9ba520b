// The engine component "qwen35_cuda": the reference engine (engine/engine.hpp) with the device
// backend (engine/device_backend.hpp, the same code the CPU tests run on the host platform as
// "qwen35_bf16") on one GPU (cuda_platform.hpp). Settings: the device backend's plus "device"
// (CUDA ordinal, 0) and the library paths cuda_gemm and cuda_experts
// (device_model/backend_options.hpp). Over NCCL, a rank of a group that fails halfway through a
// step cannot be abandoned by the others' collectives, so they may wait for it; over host-staged
// MPI they hear it.
#pragma once

#include <string_view>

#include "engine/engine.hpp"

namespace mlpt::ref::cuda {

class CudaEngine final : public ReferenceEngine {
 public:
  explicit CudaEngine(std::string_view config_json, const mlpt_component_group* group = nullptr);
};

}  // namespace mlpt::ref::cuda
