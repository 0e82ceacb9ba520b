// The benchmark loop on the GPU: configs/tiny.toml (the tiny model on the letters task) with the
// qwen35_cuda trainer and engine in place of qwen35_cpu, so every step's weights go from the
// trainer's device memory through the in-process transport into the engine's, device to device.
// It must learn as the CPU run does (tests/e2e/learning): the same run, criterion and checks
// (tests/e2e/letters_learning_run.hpp).
#include <cuda_runtime_api.h>

#include "tests/e2e/letters_learning_run.hpp"

TEST_CASE("the letters run on the qwen35_cuda trainer and engine learns as the CPU run does") {
  int gpus = 0;
  REQUIRE((cudaGetDeviceCount(&gpus) == cudaSuccess && gpus > 0));
  mlpt_test::check_letters_run_learns(mlpt_test::with_model_components(mlpt_test::tiny_letters_config(), "qwen35_cuda"),
                                      "letters task on qwen35_cuda");
}
