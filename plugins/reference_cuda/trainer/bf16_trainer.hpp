// The trainer component "qwen35_bf16": the device trainer (trainer/device_trainer.hpp, the
// qwen35_cuda trainer's code) on the host platform, bf16 storage emulated by backends/cpu/bf16_ops.
// It computes what qwen35_cuda computes, to fp32 summation order, on any CPU: the oracle a GPU run
// is held to, and a way to run the accelerator's code path (its tensor, expert and data
// parallelism included) where no accelerator is. Settings: qwen35_cpu's. Exported weights are the
// fp32 masters in host memory; states are interchangeable with qwen35_cpu's and qwen35_cuda's.
//
// A test hook for the memory plan (device_model/step_memory.hpp): when the environment names a
// folder in MLPT_MEMORY_TRACE, every step writes there, as memory_rank<rank>.txt, the bytes its
// buffers held when the step began and the most they held during it ("held N" and "peak N" lines).
#pragma once

#include <memory>
#include <string_view>

#include "backends/cpu/bf16_ops.hpp"
#include "trainer/device_trainer.hpp"

namespace mlpt::ref {

class Bf16Trainer final : public DeviceTrainer {
 public:
  explicit Bf16Trainer(std::string_view config_json, const mlpt_component_group* group = nullptr);
  void train_step(mlpt_train_step_args& args) override;

 private:
  struct CountedOps {  // the platform's ops until the platform takes them, and where they stay
    std::unique_ptr<cpu::Bf16Ops> owned = std::make_unique<cpu::Bf16Ops>();
    cpu::Bf16Ops* counted = owned.get();
  };
  Bf16Trainer(std::string_view config_json, const mlpt_component_group* group, CountedOps&& ops);
  cpu::Bf16Ops* ops_;  // the platform's, which counts the bytes of every buffer
};

}  // namespace mlpt::ref
