#include "backends/cuda/components/trainer.hpp"

#include "backends/cuda/components/cuda_platform.hpp"

namespace mlpt::ref::cuda {

CudaTrainer::CudaTrainer(std::string_view config_json, const mlpt_component_group* group)
    : CudaTrainer(config_json, group, std::make_shared<PlatformKeys>()) {}

CudaTrainer::CudaTrainer(std::string_view config_json, const mlpt_component_group* group,
                         std::shared_ptr<PlatformKeys> keys)
    : DeviceTrainer(
          config_json, group, "trainer qwen35_cuda",
          [keys](Settings& s) {
            keys->device = static_cast<int>(s.integer_or("device", 0, 0));
            keys->options = read_backend_options(s);
          },
          [keys]() -> std::unique_ptr<DevicePlatform> {
            return std::make_unique<CudaPlatform>(keys->device, keys->options, "trainer qwen35_cuda");
          }) {}

}  // namespace mlpt::ref::cuda
