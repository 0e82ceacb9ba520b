// The qwen35_cuda trainer against qwen35_cpu (tests/support/device_trainer_checks.hpp, the checks
// the CPU runs on the same trainer code with bf16 emulated): logprobs, the first GRPO step's loss
// and gradient norm, learning over a few steps, weights exported as CUDA tensors, and states the
// CPU trainer can load. The tolerances and their derivation are in that header.
#include <catch2/catch.hpp>

#include "backends/cuda/components/trainer.hpp"
#include "cuda_testing.hpp"
#include "device_trainer_checks.hpp"

TEST_CASE("qwen35_cuda trainer: logprobs, first step, learning, CUDA export and states match qwen35_cpu") {
  REQUIRE(cuda_testing::have_gpu());
  trainer_testing::check_device_trainer(
      [](const std::string& settings) { return std::make_unique<mlpt::ref::cuda::CudaTrainer>(settings); }, kDLCUDA,
      [](const DLTensor& d, std::vector<float>& h) {
        cuda_testing::check(cudaMemcpy(h.data(), d.data, h.size() * 4, cudaMemcpyDeviceToHost), "test: export");
      });
}
