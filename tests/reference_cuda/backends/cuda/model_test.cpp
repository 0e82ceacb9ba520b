// The whole model on the GPU: the device model (device_model/, the same code the CPU tests run)
// over the CUDA ops, against its exact oracle (the same model over the CPU's bf16 emulation) and
// against the fp32 reference model, with the tolerances of tests/support/device_model_checks.hpp:
// derived from bf16's rounding and the reference's own sensitivity, not guessed.
#include <catch2/catch.hpp>

#include "backends/cpu/bf16_ops.hpp"
#include "backends/cuda/cuda_ops.hpp"
#include "cuda_testing.hpp"
#include "device_model_checks.hpp"

namespace {

struct Gpu {
  mlpt::ref::cuda::Context ctx = mlpt::ref::cuda::create_context();
  mlpt::ref::cuda::CudaOps ops{ctx};
  ~Gpu() { mlpt::ref::cuda::destroy_context(ctx); }
};

}  // namespace

TEST_CASE("model: the GPU computes what its exact oracle (the CPU's bf16 emulation) computes") {
  REQUIRE(cuda_testing::have_gpu());
  Gpu gpu;
  mlpt::ref::cpu::Bf16Ops oracle;
  model_testing::check_against_oracle(gpu.ops, oracle);
}

TEST_CASE("model: logprobs of packed sequences are the fp32 reference's within bf16's rounding") {
  REQUIRE(cuda_testing::have_gpu());
  Gpu gpu;
  model_testing::check_forward_against_reference(gpu.ops);
}

TEST_CASE("model: the gradient is the fp32 reference's within bf16's rounding") {
  REQUIRE(cuda_testing::have_gpu());
  Gpu gpu;
  model_testing::check_gradient_against_reference(gpu.ops);
}

TEST_CASE("model: prefill then decode with device state equals one full forward") {
  REQUIRE(cuda_testing::have_gpu());
  Gpu gpu;
  model_testing::check_decode_equals_full_forward(gpu.ops);
}
