// The device trainer (trainer/device_trainer.hpp: the qwen35_cuda trainer's code) on the host
// platform with bf16 emulated, against qwen35_cpu: the checks and tolerances the GPU test runs
// (tests/support/device_trainer_checks.hpp), here on every CI machine.
#include "trainer/device_trainer.hpp"

#include <catch2/catch.hpp>
#include <cstring>

#include "backends/cpu/bf16_ops.hpp"
#include "device_trainer_checks.hpp"

TEST_CASE(
    "device trainer (bf16 on the CPU): logprobs, first step, learning, export and states match qwen35_cpu") {
  trainer_testing::check_device_trainer(
      [](const std::string& settings) -> std::unique_ptr<mlpt::sdk::Trainer> {
        return std::make_unique<mlpt::ref::DeviceTrainer>(
            settings, nullptr, "trainer device (cpu-bf16)", nullptr, [] {
              return std::make_unique<mlpt::ref::HostPlatform>(std::make_unique<mlpt::ref::cpu::Bf16Ops>());
            });
      },
      kDLCPU, [](const DLTensor& d, std::vector<float>& h) { std::memcpy(h.data(), d.data, h.size() * 4); });
}
