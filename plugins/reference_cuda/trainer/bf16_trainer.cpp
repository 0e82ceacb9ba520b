#include "trainer/bf16_trainer.hpp"

#include "backends/cpu/bf16_ops.hpp"

namespace mlpt::ref {

Bf16Trainer::Bf16Trainer(std::string_view config_json, const mlpt_component_group* group)
    : DeviceTrainer(config_json, group, "trainer qwen35_bf16", nullptr,
                    [] { return std::make_unique<HostPlatform>(std::make_unique<cpu::Bf16Ops>()); }) {}

}  // namespace mlpt::ref
