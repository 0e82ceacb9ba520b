#include "backends/cuda/components/engine_backend.hpp"

#include <memory>

#include "backends/cuda/components/cuda_platform.hpp"
#include "engine/device_backend.hpp"

namespace mlpt::ref::cuda {

CudaEngine::CudaEngine(std::string_view config_json, const mlpt_component_group* group)
    : ReferenceEngine(config_json, "engine qwen35_cuda", [group](sdk::Settings& s, const std::string& dir, bool chunked) {
        auto device = std::make_shared<int>(0);
        return std::make_unique<DeviceEngineBackend>(
            s, dir, chunked, group, "engine qwen35_cuda",
            [device](sdk::Settings& settings) { *device = static_cast<int>(settings.integer_or("device", 0, 0)); },
            [device]() -> std::unique_ptr<DevicePlatform> {
              return std::make_unique<CudaPlatform>(*device, "engine qwen35_cuda");
            });
      }) {}

}  // namespace mlpt::ref::cuda
