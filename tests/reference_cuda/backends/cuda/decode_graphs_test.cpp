// Decode steps recorded as CUDA graphs (device_model/decode_graphs.hpp, cuda_graphs = "decode")
// against the same steps run op by op, bit for bit: both take the device-sized expert forms, so they
// launch the same kernels on the same shapes. Through the runner (a full bucket, a bucket the batch
// does not fill, new sessions after a refit in place and into new buffers: the case of recordings
// that baked in the GDN state buffers and decoded garbage after a weight sync), on cuBLAS and on
// cuBLASLt, and through the qwen35_cuda engine with cuda_graphs on and off (full buckets: the same
// shapes on both sides), before and after a weight load.
#include <catch2/catch.hpp>

#include "backends/cuda/components/engine_backend.hpp"
#include "backends/cuda/cuda_ops.hpp"
#include "cuda_testing.hpp"
#include "decode_graph_checks.hpp"
#include "gpu_model_fixtures.hpp"
#include "model/weights.hpp"

using namespace cuda_testing;

namespace {

struct Gpu {
  explicit Gpu(const mlpt::ref::BackendOptions& o = {}) : ctx(mlpt::ref::cuda::create_context(o)), ops(ctx) {}
  ~Gpu() { mlpt::ref::cuda::destroy_context(ctx); }
  mlpt::ref::cuda::Context ctx;
  mlpt::ref::cuda::CudaOps ops;
};

}  // namespace

TEST_CASE(
    "decode graphs (GPU): replayed steps equal op-by-op steps bit for bit, re-recorded as tables widen") {
  REQUIRE(have_gpu());
  Gpu gpu;
  REQUIRE(gpu.ops.recorder() != nullptr);
  model_testing::check_recorded_decode_equals_eager(gpu.ops);
}

TEST_CASE("decode graphs (GPU): the same on cuBLASLt") {
  REQUIRE(have_gpu());
  mlpt::ref::BackendOptions o;
  o.gemm = mlpt::ref::GemmLibrary::cublaslt;
  Gpu gpu(o);
  model_testing::check_recorded_decode_equals_eager(gpu.ops);
}

TEST_CASE("decode graphs (GPU): a batch that does not fill its bucket leaves its rows as a full batch's") {
  REQUIRE(have_gpu());
  Gpu gpu;
  model_testing::check_partial_bucket(gpu.ops);
}

TEST_CASE("decode graphs (GPU): new sessions after a weight sync decode as op-by-op steps do") {
  REQUIRE(have_gpu());
  Gpu gpu;
  model_testing::check_decode_after_refit(gpu.ops);
}

TEST_CASE(
    "decode graphs (GPU): the qwen35_cuda engine with cuda_graphs on and off, before and after a load") {
  REQUIRE(have_gpu());
  TempDir dir{"decode_graphs_engine"};
  const ModelConfig cfg = small_config();
  const std::string path = (dir.path / "ck").string();
  mlpt::ref::save_checkpoint(path, bf16_exact_weights(cfg, 21), mlpt::ref::Dtype::f32);
  auto settings = [&](const char* graphs) {
    return R"({"checkpoint": ")" + path + R"(", "max_step_tokens": 64, "kv_block_size": 8, )" +
           R"("cuda_experts": "device_sized", "cuda_graphs": ")" + graphs + R"("})";
  };
  model_testing::check_engine_with_and_without_graphs<mlpt::ref::cuda::CudaEngine>(cfg, settings);
}
