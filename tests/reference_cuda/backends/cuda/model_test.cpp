// The whole model on the GPU: the device model (device_model/, the same code the CPU tests run)
// over the CUDA ops, against its exact oracle (the same model over the CPU's bf16 emulation) and
// against the fp32 reference model, with the tolerances of tests/support/device_model_checks.hpp:
// derived from bf16's rounding and the reference's own sensitivity, not guessed. The same checks
// against the reference run with cuda_attention = "cudnn" (cuDNN's fused attention for training,
// prefill and paged decode); not the exact-oracle check, whose premise (the same rounding points as
// the bf16 emulation) cuDNN does not keep: it rounds the probabilities to bf16 before P·V.
#include <catch2/catch.hpp>

#include "backends/cpu/bf16_ops.hpp"
#include "backends/cuda/cuda_ops.hpp"
#include "backends/cuda/cudnn_attention.hpp"
#include "cuda_testing.hpp"
#include "device_model/backend_options.hpp"
#include "device_model_checks.hpp"

namespace {

struct Gpu {
  mlpt::ref::cuda::Context ctx;
  mlpt::ref::cuda::CudaOps ops;
  explicit Gpu(const mlpt::ref::BackendOptions& o = {}) : ctx(mlpt::ref::cuda::create_context(o)), ops(ctx) {}
  ~Gpu() { mlpt::ref::cuda::destroy_context(ctx); }
};

mlpt::ref::BackendOptions cudnn_attention() {
  mlpt::ref::BackendOptions o;
  o.attention = mlpt::ref::AttentionLibrary::cudnn;
  return o;
}

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

TEST_CASE("model: with cuDNN's attention, logprobs and the gradient are the fp32 reference's within bf16") {
  REQUIRE(cuda_testing::have_gpu());
  Gpu gpu(cudnn_attention());
  model_testing::check_forward_against_reference(gpu.ops);
  model_testing::check_gradient_against_reference(gpu.ops);
  CHECK(gpu.ctx.attention->plans_built() > 0);
  CHECK(gpu.ctx.attention->kernel_fallbacks() == 0);
}

TEST_CASE("model: with cuDNN's attention, prefill then paged decode equals one full forward") {
  REQUIRE(cuda_testing::have_gpu());
  Gpu gpu(cudnn_attention());
  model_testing::check_decode_equals_full_forward(gpu.ops);
  CHECK(gpu.ctx.attention->plans_built() >= 2);  // the packed forward and the paged one
}
