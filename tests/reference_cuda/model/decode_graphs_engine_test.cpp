// The engine's side of the decode graphs (engine/device_backend with cuda_graphs = "decode") on the
// CPU: qwen35_bf16, the qwen35_cuda engine's code on the host, runs its one-token steps through
// device_model/decode_graphs (unrecorded: the host has no recorder) and generates exactly what it
// generates without them, before and after a weight load that reallocates its weights. The GPU
// runs the same comparison recorded (tests/reference_cuda/backends/cuda/decode_graphs_test.cpp).
#include <catch2/catch.hpp>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "device_model_fixtures.hpp"
#include "engine/bf16_engine.hpp"
#include "model/named_tensors.hpp"
#include "model/weights.hpp"
#include "tests/support/test_util.hpp"

using mlpt::sdk::GenerationRequest;

namespace {

// Four requests submitted while the engine is paused (one step prefills them all), prompts of 5 to
// 14 tokens, 12 new tokens each: every decode step is a full bucket of four, so both engines
// compute the same shapes in every step.
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
    r->max_new_tokens = 12;
    r->record_routed_experts = true;
    out.push_back(r);
    e.submit(r);
  }
  e.resume();
  for (auto& r : out) r->wait();
  return out;
}

void check_same(const std::vector<std::shared_ptr<GenerationRequest>>& got,
                const std::vector<std::shared_ptr<GenerationRequest>>& want) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("request " << i);
    REQUIRE(got[i]->error_code() == MLPT_OK);
    REQUIRE(want[i]->error_code() == MLPT_OK);
    CHECK(got[i]->out_tokens.size() == 12);
    CHECK(got[i]->out_tokens == want[i]->out_tokens);
    CHECK((got[i]->out_logprobs.size() == want[i]->out_logprobs.size() &&
           std::memcmp(got[i]->out_logprobs.data(), want[i]->out_logprobs.data(),
                       got[i]->out_logprobs.size() * sizeof(float)) == 0));
    CHECK(got[i]->out_routed_experts == want[i]->out_routed_experts);
  }
}

}  // namespace

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
  mlpt::ref::Bf16Engine off(settings("off")), on(settings("decode"));
  check_same(generate(on, 5, cfg.vocab_size), generate(off, 5, cfg.vocab_size));

  // Host tensors of other weights: both engines build new weight buffers, the decode graphs' key
  // changes with them.
  mlpt::ref::Weights<float> next = model_testing::bf16_exact_weights(cfg, 22);
  std::vector<std::vector<int64_t>> shapes;
  auto host = mlpt::ref::export_named_tensors(next, shapes);
  for (mlpt::ref::Bf16Engine* e : {&off, &on}) {
    e->pause();
    mlpt_load_weights_args la{};
    la.struct_size = MLPT_LOAD_WEIGHTS_ARGS_STRUCT_SIZE;
    la.tensors = host.data();
    la.num_tensors = host.size();
    la.version = 1;
    e->load_weights(la);
    e->resume();
  }
  const auto before = generate(off, 5, cfg.vocab_size);
  check_same(generate(on, 5, cfg.vocab_size), before);
  CHECK(before[0]->out_weight_version == 1);

  std::string refusal;
  try {
    mlpt::ref::Bf16Engine bad(settings("always"));
  } catch (const std::exception& e) {
    refusal = e.what();
  }
  CHECK_THAT(refusal, Catch::Contains("cuda_graphs") && Catch::Contains("always"));
}
