// The engine's side of the decode graphs (engine/device_backend with cuda_graphs = "decode") on the
// CPU: qwen35_bf16, the qwen35_cuda engine's code on the host, runs its one-token steps through
// device_model/decode_graphs (unrecorded: the host has no recorder) and generates exactly what it
// generates without them, before and after a weight load that reallocates its weights. The GPU
// runs the same comparison recorded (tests/reference_cuda/backends/cuda/decode_graphs_test.cpp).
#include <catch2/catch.hpp>
#include <string>

#include "decode_graph_checks.hpp"
#include "engine/bf16_engine.hpp"
#include "model/weights.hpp"
#include "tests/support/test_util.hpp"

TEST_CASE(
    "decode graphs (qwen35_bf16 engine): cuda_graphs on and off generate alike, before and after a load") {
  mlpt_test::TempDir dir("decode_graphs_engine");
  const mlpt::ref::ModelConfig cfg = model_testing::small_config();
  const std::string path = dir / "ck";
  mlpt::ref::save_checkpoint(path, model_testing::bf16_exact_weights(cfg, 21), mlpt::ref::Dtype::f32);
  auto settings = [&](const char* graphs) {
    return R"({"checkpoint": ")" + path +
           R"(", "max_step_tokens": 64, "kv_block_size": 8, "cuda_graphs": ")" + graphs + R"("})";
  };
  model_testing::check_engine_with_and_without_graphs<mlpt::ref::Bf16Engine>(cfg, settings);

  std::string refusal;
  try {
    mlpt::ref::Bf16Engine bad(settings("always"));
  } catch (const std::exception& e) {
    refusal = e.what();
  }
  CHECK_THAT(refusal, Catch::Contains("cuda_graphs") && Catch::Contains("always"));
}
