// The benchmark loop on the GPU: configs/tiny.toml (the tiny model on the letters task) with the
// qwen35_cuda trainer and engine in place of qwen35_cpu, so every step's weights go from the
// trainer's device memory through the in-process transport into the engine's, device to device.
// It must learn as the CPU run does (tests/e2e/learning): the same run, criterion and checks
// (tests/e2e/letters_learning_run.hpp).
#include <cuda_runtime_api.h>

#include "../../e2e/letters_learning_run.hpp"

TEST_CASE("the letters run on the qwen35_cuda trainer and engine learns as the CPU run does") {
  int gpus = 0;
  REQUIRE((cudaGetDeviceCount(&gpus) == cudaSuccess && gpus > 0));
  auto config = mlpt_test::tiny_letters_config();
  int swapped = 0;
  for (auto& c : config.components)
    if ((c.kind == MLPT_COMPONENT_TRAINER || c.kind == MLPT_COMPONENT_ENGINE) && c.name == "qwen35_cpu") {
      c.name = "qwen35_cuda";
      ++swapped;
    }
  REQUIRE(swapped == 2);
  mlpt_test::check_letters_run_learns(config, "letters task on qwen35_cuda");
}
