#include "backends/cuda/components/engine_backend.hpp"

#include <memory>

#include "backends/cuda/components/cuda_platform.hpp"
#include "engine/device_backend.hpp"

namespace mlpt::ref::cuda {

CudaEngine::CudaEngine(std::string_view config_json, const mlpt_component_group* group)
    : ReferenceEngine(
          config_json, "engine qwen35_cuda", [group](sdk::Settings& s, const std::string& dir, bool chunked) {
            struct PlatformKeys {
              int device = 0;
              BackendOptions options;
            };
            auto keys = std::make_shared<PlatformKeys>();
            return std::make_unique<DeviceEngineBackend>(
                s, dir, chunked, group, "engine qwen35_cuda",
                [keys](sdk::Settings& settings) {
                  keys->device = static_cast<int>(settings.integer_or("device", 0, 0));
                  keys->options = read_backend_options(settings);
                },
                [keys]() -> std::unique_ptr<DevicePlatform> {
                  return std::make_unique<CudaPlatform>(keys->device, keys->options, "engine qwen35_cuda");
                });
          }) {}

}  // namespace mlpt::ref::cuda
