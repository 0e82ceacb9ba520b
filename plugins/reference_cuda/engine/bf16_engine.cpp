#include "engine/bf16_engine.hpp"

#include <memory>

#include "backends/cpu/bf16_ops.hpp"
#include "device_model/backend_options.hpp"
#include "engine/device_backend.hpp"

namespace mlpt::ref {

Bf16Engine::Bf16Engine(std::string_view config_json, const mlpt_component_group* group)
    : ReferenceEngine(
          config_json, "engine qwen35_bf16", [group](sdk::Settings& s, const std::string& dir, bool chunked) {
            // cuda_graphs as qwen35_cuda takes it: the decode graphs' staging and padding, unrecorded.
            auto graphs = std::make_shared<bool>(false);
            return std::make_unique<DeviceEngineBackend>(
                s, dir, chunked, group, "engine qwen35_bf16",
                [graphs](sdk::Settings& settings) {
                  *graphs = parse_decode_graphs(settings.choice_or("cuda_graphs", "off", {"off", "decode"}),
                                                "cuda_graphs") == DecodeGraphMode::decode;
                },
                [graphs] {
                  return std::make_unique<HostPlatform>(std::make_unique<cpu::Bf16Ops>(), *graphs);
                });
          }) {}

}  // namespace mlpt::ref
