#include "engine/bf16_engine.hpp"

#include <memory>

#include "backends/cpu/bf16_ops.hpp"
#include "engine/device_backend.hpp"

namespace mlpt::ref {

Bf16Engine::Bf16Engine(std::string_view config_json, const mlpt_component_group* group)
    : ReferenceEngine(config_json, "engine qwen35_bf16",
                      [group](sdk::Settings& s, const std::string& dir, bool chunked) {
                        return std::make_unique<DeviceEngineBackend>(
                            s, dir, chunked, group, "engine qwen35_bf16", nullptr,
                            [] { return std::make_unique<HostPlatform>(std::make_unique<cpu::Bf16Ops>()); });
                      }) {}

}  // namespace mlpt::ref
