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
#include "model/named_tensors.hpp"
#include "model/weights.hpp"

using namespace cuda_testing;
using mlpt::sdk::GenerationRequest;

namespace {

struct Gpu {
  explicit Gpu(const mlpt::ref::BackendOptions& o = {}) : ctx(mlpt::ref::cuda::create_context(o)), ops(ctx) {}
  ~Gpu() { mlpt::ref::cuda::destroy_context(ctx); }
  mlpt::ref::cuda::Context ctx;
  mlpt::ref::cuda::CudaOps ops;
};

// Four requests submitted while the engine is paused (so one step prefills them all), prompts of 5
// to 14 tokens, 24 new tokens each: every decode step is a full bucket of four, and both engines
// multiply the same shapes in every step.
std::vector<std::shared_ptr<GenerationRequest>> generate(mlpt::sdk::Engine& e, uint64_t seed, int64_t vocab) {
  std::mt19937_64 rng(seed);
  std::vector<std::shared_ptr<GenerationRequest>> out;
  uint64_t id = 1;
  e.pause();
  for (int64_t n : {5, 9, 14, 7}) {
    auto r = std::make_shared<GenerationRequest>();
    r->id = id++;
    r->tokens = model_testing::random_tokens(rng, n, vocab);
    r->sampling.struct_size = MLPT_SAMPLING_PARAMS_STRUCT_SIZE;
    r->sampling.temperature = 0.9f;
    r->sampling.top_p = 0.95f;
    r->sampling.seed = seed + id;
    r->max_new_tokens = 24;
    r->record_routed_experts = true;
    out.push_back(r);
    e.submit(r);
  }
  e.resume();
  for (auto& r : out) r->wait();
  return out;
}

void check_same_generations(const std::vector<std::shared_ptr<GenerationRequest>>& got,
                            const std::vector<std::shared_ptr<GenerationRequest>>& want) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("request " << i);
    REQUIRE(got[i]->error_code() == MLPT_OK);
    REQUIRE(want[i]->error_code() == MLPT_OK);
    CHECK(got[i]->out_tokens == want[i]->out_tokens);
    CHECK(model_testing::same_bits(got[i]->out_logprobs, want[i]->out_logprobs));
    CHECK(got[i]->out_routed_experts == want[i]->out_routed_experts);
  }
}

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
  mlpt::ref::cuda::CudaEngine off(settings("off")), on(settings("decode"));
  check_same_generations(generate(on, 5, cfg.vocab_size), generate(off, 5, cfg.vocab_size));

  // A weight sync (host tensors: the engine reallocates its weights), then new requests.
  Weights<float> next = bf16_exact_weights(cfg, 22);
  std::vector<std::vector<int64_t>> shapes;
  auto host = mlpt::ref::export_named_tensors(next, shapes);
  for (mlpt::ref::cuda::CudaEngine* e : {&off, &on}) {
    e->pause();
    mlpt_load_weights_args la{};
    la.struct_size = MLPT_LOAD_WEIGHTS_ARGS_STRUCT_SIZE;
    la.tensors = host.data();
    la.num_tensors = host.size();
    la.version = 1;
    e->load_weights(la);
    e->resume();
  }
  const auto after_off = generate(off, 6, cfg.vocab_size);
  check_same_generations(generate(on, 6, cfg.vocab_size), after_off);
  CHECK(after_off[0]->out_weight_version == 1);
}
