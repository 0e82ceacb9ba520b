// One GPU as a DevicePlatform (device_model/platform.hpp) for the qwen35_cuda components: its
// context (a stream and the cuBLAS handle bound to it), the CUDA ops on it, device communicators
// (parallel/device_communicator.hpp: NCCL where each rank of a group has a GPU of its own, else
// host-staged MPI), exports as kDLCUDA tensors, and reads of other components' CUDA tensors.
// The library paths (cuda_gemm, cuda_experts, ...) and cuda_graphs are the component's settings with
// the environment's overrides (device_model/backend_options.hpp).
#pragma once

#include <memory>
#include <string>

#include "backends/cuda/cuda_ops.hpp"
#include "device_model/backend_options.hpp"
#include "device_model/platform.hpp"

namespace mlpt::ref::cuda {

class CudaPlatform final : public DevicePlatform {
 public:
  // Makes `device` current; throws "<component>: CUDA device N is not available (M visible)".
  CudaPlatform(int device, const BackendOptions& options, const char* component);
  ~CudaPlatform() override;
  Ops& ops() override { return *ops_; }
  void bind_thread() override;
  std::unique_ptr<Communicator> device_group(Communicator& host_group, std::string& kind) override;
  DLDevice dl_device() const override { return DLDevice{kDLCUDA, device_}; }
  void* stream() const override { return ctx_.stream; }
  const BackendOptions& options() const { return options_; }
  void wait_for(const mlpt_device_ready& ready) override;
  bool copy_device_tensor(const DLTensor& t, size_t bytes, void* dst) override;
  bool decode_graphs() const override { return options_.graphs == DecodeGraphMode::decode; }

 private:
  int device_;
  BackendOptions options_;
  Context ctx_;
  std::unique_ptr<CudaOps> ops_;
};

}  // namespace mlpt::ref::cuda
