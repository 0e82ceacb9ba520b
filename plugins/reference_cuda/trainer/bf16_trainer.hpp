// The trainer component "qwen35_bf16": the device trainer (trainer/device_trainer.hpp, the
// qwen35_cuda trainer's code) on the host platform, bf16 storage emulated by backends/cpu/bf16_ops.
// It computes what qwen35_cuda computes, to fp32 summation order, on any CPU: the oracle a GPU run
// is held to, and a way to run the accelerator's code path (its tensor, expert and data
// parallelism included) where no accelerator is. Settings: qwen35_cpu's. Exported weights are the
// fp32 masters in host memory; states are interchangeable with qwen35_cpu's and qwen35_cuda's.
#pragma once

#include <string_view>

#include "trainer/device_trainer.hpp"

namespace mlpt::ref {

class Bf16Trainer final : public DeviceTrainer {
 public:
  explicit Bf16Trainer(std::string_view config_json, const mlpt_component_group* group = nullptr);
};

}  // namespace mlpt::ref
