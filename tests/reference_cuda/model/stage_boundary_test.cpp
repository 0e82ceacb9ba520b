// The fp32 model's pipeline stages with their boundary messages passed by the caller
// (ForwardBatch::boundary, as the CPU trainer's 1F1B schedule passes them): two stages of one
// model in one process, run in the 1F1B order of two micro-batches (stage 0: forward 0, forward 1,
// backward 0, backward 1), give the hidden states and the gradients of the model on one rank bit
// for bit, the stages never touching their pipeline group. A boundary without the buffer a stage
// writes is refused.
#include <catch2/catch.hpp>
#include <memory>
#include <vector>

#include "mlpt/sdk/error.hpp"
#include "model/model.hpp"
#include "model/parallel/shard_weights.hpp"
#include "model/weights.hpp"
#include "model_fixtures.hpp"
#include "tests/support/stage_place.hpp"

using namespace mlpt::ref;
using mlpt_test::StagePlace;

namespace {

ForwardBatch<float> batch_of(const std::vector<int32_t>& tokens) {
  ForwardBatch<float> b;
  b.tokens = tokens.data();
  b.offsets = {0, static_cast<int64_t>(tokens.size())};
  return b;
}

// A stage of the two: its weights, its place in a pipeline group of two and its gradients.
struct Stage {
  Stage(const Weights<float>& whole, int stage)
      : w(shard_weights(whole, ModelShard::of_model_rank(1, 1, 2, stage))),
        place(stage, 2),
        grads(zeros_like_layout<float>(w.config, w.layout)) {
    groups.pipeline = &place;
  }
  Weights<float> w;
  StagePlace place;
  ModelParallel groups;
  Weights<float> grads;
};

// A micro-batch between a stage's forward and its backward.
struct InFlight {
  ForwardBatch<float> b;
  std::vector<float> inputs, hidden, output;  // output: the stage's message out, [N, H]
  std::vector<int16_t> experts;
};

}  // namespace

TEST_CASE(
    "model: two pipeline stages passing their boundary through the caller in the 1F1B order are one rank bit "
    "for bit") {
  const ModelConfig cfg = mlpt_test::micro_config();  // four layers: two a stage
  const Weights<float> w = init_weights<float>(cfg, 29);
  const int64_t H = cfg.hidden_size, per = cfg.num_moe_layers() * cfg.experts_per_token;
  const std::vector<std::vector<int32_t>> micro_batches = {{3, 14, 15, 9, 26, 5, 35}, {8, 9, 7, 9, 3}};
  std::vector<std::vector<float>> d_hidden;  // fixed values
  for (size_t k = 0; k < micro_batches.size(); ++k) {
    d_hidden.emplace_back(micro_batches[k].size() * size_t(H));
    for (size_t i = 0; i < d_hidden[k].size(); ++i)
      d_hidden[k][i] = 0.01f * float((i * 7 + k * 3) % 13) - 0.06f;
  }

  // One rank: forward and backward of each micro-batch in turn.
  Weights<float> whole_grads = zeros_like_layout<float>(cfg, w.layout);
  std::vector<std::vector<float>> whole_hidden;
  for (size_t k = 0; k < micro_batches.size(); ++k) {
    ForwardBatch<float> b = batch_of(micro_batches[k]);
    std::vector<int16_t> experts(micro_batches[k].size() * size_t(per));
    std::vector<float> inputs;
    b.routed_experts = experts.data();
    b.layer_inputs = &inputs;
    whole_hidden.push_back(forward_hidden(w, b));
    backward(w, b, inputs, experts.data(), d_hidden[k].data(), whole_grads, BackwardOptions{true});
  }

  // Two stages, the caller passing the messages.
  Stage first(w, 0), last(w, 1);
  Stage* stages[2] = {&first, &last};
  InFlight at[2][2];  // [stage][micro-batch]
  auto forward = [&](int s, size_t k, const float* input) {
    InFlight& f = at[s][k];
    f.b = batch_of(micro_batches[k]);
    f.b.parallel = &stages[s]->groups;
    f.experts.assign(micro_batches[k].size() * size_t(per), 0);
    f.b.routed_experts = f.experts.data();
    f.b.layer_inputs = &f.inputs;
    f.output.assign(micro_batches[k].size() * size_t(H), 0.0f);
    const StageBoundary boundary{input, s == 0 ? f.output.data() : nullptr};
    f.b.boundary = &boundary;
    f.hidden = forward_hidden(stages[s]->w, f.b);
    f.b.routed_experts = nullptr;
    f.b.boundary = nullptr;
  };
  auto backward_of = [&](int s, size_t k, const float* dh, const float* input) {
    InFlight& f = at[s][k];
    const StageBoundary boundary{input, s == 1 ? f.output.data() : nullptr};
    f.b.boundary = &boundary;
    backward(stages[s]->w, f.b, f.inputs, f.experts.data(), dh, stages[s]->grads, BackwardOptions{true});
  };
  // Each stage records its own layers' experts and replays them in its backward.
  forward(0, 0, nullptr);
  forward(0, 1, nullptr);  // stage 0's warm-up runs one forward ahead
  forward(1, 0, at[0][0].output.data());
  backward_of(1, 0, d_hidden[0].data(), nullptr);
  backward_of(0, 0, nullptr, at[1][0].output.data());  // d(stage 0's output) of micro-batch 0
  forward(1, 1, at[0][1].output.data());
  backward_of(1, 1, d_hidden[1].data(), nullptr);
  backward_of(0, 1, nullptr, at[1][1].output.data());

  for (size_t k = 0; k < micro_batches.size(); ++k) {
    INFO("micro-batch " << k);
    CHECK(at[0][k].hidden.empty());  // a stage before the last returns nothing
    CHECK(at[1][k].hidden == whole_hidden[k]);
  }
  size_t compared = 0;
  for (size_t i = 0; i < w.layout.tensors.size(); ++i) {
    INFO(w.layout.tensors[i].name);
    int holders = 0;
    for (const Stage* st : stages) {
      if (st->w.layout.tensors[i].numel() == 0) continue;  // another stage's tensor
      ++holders;
      CHECK(st->grads.values[i] == whole_grads.values[i]);
    }
    CHECK(holders == 1);
    compared += size_t(holders);
  }
  CHECK(compared == w.layout.tensors.size());
}

TEST_CASE(
    "model: a pipeline stage's boundary without the buffer it writes is refused, not written through NULL") {
  const ModelConfig cfg = mlpt_test::micro_config();
  const Weights<float> w = init_weights<float>(cfg, 29);
  Stage first(w, 0), last(w, 1);
  const std::vector<int32_t> tokens = {3, 14, 15};
  const StageBoundary nothing{};
  ForwardBatch<float> b = batch_of(tokens);
  b.parallel = &first.groups;
  b.boundary = &nothing;  // stage 0 sends its output: no buffer for it
  CHECK_THROWS_WITH(forward_hidden(first.w, b), Catch::Contains("without an output buffer"));
  b.parallel = &last.groups;  // stage 1 receives its input: none given
  CHECK_THROWS_WITH(forward_hidden(last.w, b), Catch::Contains("without an input"));
}
