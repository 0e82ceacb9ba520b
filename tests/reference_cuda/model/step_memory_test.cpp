// The parts of the step memory plan (device_model/step_memory.hpp) that are the code's own sizes,
// against the code: the micro-batches a stage holds at once are what the 1F1B schedule
// (trainer/pipeline_schedule.hpp) keeps between a forward and its backward, and the kept layer
// inputs and final hidden state are the bytes forward_hidden allocates for them on the CPU backend.
#include "device_model/step_memory.hpp"

#include <algorithm>
#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "backends/cpu/bf16_ops.hpp"
#include "device_model/model.hpp"
#include "model/weights.hpp"
#include "trainer/pipeline_schedule.hpp"

using namespace mlpt::ref;

TEST_CASE("the plan's micro-batches in flight are the most the 1F1B schedule holds on each stage") {
  for (int pp = 1; pp <= 5; ++pp)
    for (int stage = 0; stage < pp; ++stage)
      for (int64_t m = 0; m <= 7; ++m) {
        INFO("pp " << pp << " stage " << stage << " micro-batches " << m);
        int64_t held = 0, most = 0;  // a micro-batch is held from its forward to the end of its backward
        for (const PipelineStep& s : one_forward_one_backward(pp, stage, m)) {
          if (s.action == PipelineAction::forward) most = std::max(most, ++held);
          if (s.action == PipelineAction::backward) --held;
        }
        CHECK(held == 0);
        CHECK(dev::in_flight_micro_batches(pp, stage, m) == most);
      }
  CHECK_THROWS_WITH(dev::in_flight_micro_batches(2, 2, 1), Catch::Contains("stage 2 of pipeline_parallel 2"));
}

TEST_CASE("the plan's kept inputs are the bytes forward_hidden allocates for the backward") {
  const ModelConfig full = load_model_config(std::string(MLPT_SOURCE_DIR) + "/configs/models/tiny.json");
  const Weights<float> w = init_weights<float>(full, 3);
  cpu::Bf16Ops ops;
  const dev::DeviceWeights device = dev::upload_weights(ops, w);
  for (int64_t n : {1, 7, 40}) {
    INFO(n << " tokens");
    dev::DeviceBatch batch;
    for (int64_t t = 0; t < n; ++t)
      batch.tokens.push_back(static_cast<int32_t>((5 * t + 1) % full.vocab_size));
    batch.offsets = {0, n};
    dev::WorkspacePtr ws = dev::make_workspace();
    Buffer hidden, inputs;
    dev::forward_hidden(ops, device, batch, *ws, hidden, &inputs);
    const dev::StepMemory plan = dev::step_memory(full, ModelShard{}, {n});
    CHECK(plan.in_flight == 1);
    CHECK(plan.kept_inputs == static_cast<double>(inputs.bytes() + hidden.bytes()));
    CHECK(plan.messages == 0);  // one stage: nothing passes between stages
  }
}
