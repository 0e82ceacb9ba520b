#include "backends/cuda/components/trainer.hpp"

#include "backends/cuda/components/cuda_platform.hpp"

namespace mlpt::ref::cuda {

CudaTrainer::CudaTrainer(std::string_view config_json, const mlpt_component_group* group)
    : CudaTrainer(config_json, group, std::make_shared<int>(0)) {}

CudaTrainer::CudaTrainer(std::string_view config_json, const mlpt_component_group* group, std::shared_ptr<int> device)
    : DeviceTrainer(
          config_json, group, "trainer qwen35_cuda",
          [device](Settings& s) { *device = static_cast<int>(s.integer_or("device", 0, 0)); },
          [device]() -> std::unique_ptr<DevicePlatform> {
            return std::make_unique<CudaPlatform>(*device, "trainer qwen35_cuda");
          }) {}

}  // namespace mlpt::ref::cuda
