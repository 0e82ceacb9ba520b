// The memory a rank of the device components allocates, as `mlpt model plan` states it
// (device_model/rank_memory.hpp), against what the code allocates: every rank of each layout
// uploads its shard through allocate_weights on the CPU backend, which counts the bytes asked of
// it, and the busiest rank's bytes and elements must be the plan's exactly; a layout the code
// refuses cannot be planned.
#include <catch2/catch.hpp>

#include <algorithm>
#include <string>

#include "backends/cpu/bf16_ops.hpp"
#include "device_model/model.hpp"
#include "device_model/rank_memory.hpp"
#include "model/parallel/shard_weights.hpp"
#include "model/weights.hpp"

using namespace mlpt::ref;

namespace {

ModelConfig model(const char* name) {
  return load_model_config(std::string(MLPT_SOURCE_DIR) + "/configs/models/" + name + ".json");
}

}  // namespace

TEST_CASE("the plan's bytes per rank are what every rank of a layout allocates for its shard's weights") {
  struct Layout {
    const char* model;
    int tp, ep, etp, pp = 1;
  };
  for (const Layout& l : {Layout{"tiny", 1, 1, 1}, Layout{"tiny", 2, 1, 1}, Layout{"tiny", 2, 2, 1}, Layout{"tiny", 2, 2, 2},
                          Layout{"tiny", 1, 4, 1}, Layout{"tiny-tp8", 4, 1, 1}, Layout{"tiny-tp8", 4, 2, 1},
                          Layout{"tiny", 1, 1, 1, 2}, Layout{"tiny", 2, 2, 1, 2}, Layout{"tiny-tp8", 4, 1, 1, 2},
                          Layout{"tiny", 1, 1, 1, 3}}) {
    INFO(l.model << " tp " << l.tp << " ep " << l.ep << " etp " << l.etp << " pp " << l.pp);
    const ModelConfig full = model(l.model);
    const Weights<float> whole = init_weights<float>(full, 5);
    const dev::RankMemory plan = dev::rank_memory(full, l.tp, l.ep, l.etp, 1, l.pp);
    double most_bytes = 0;
    int64_t most_elements = 0;
    for (int r = 0; r < l.tp * l.ep * l.pp; ++r) {
      const Weights<float> shard = shard_weights(whole, ModelShard::of_model_rank(l.tp, l.ep, l.pp, r, l.etp));
      cpu::Bf16Ops ops;
      const dev::DeviceWeights uploaded = dev::upload_weights(ops, shard);
      most_bytes = std::max(most_bytes, static_cast<double>(ops.live_bytes()));
      int64_t elements = 0;
      for (const std::vector<float>& t : shard.values) elements += static_cast<int64_t>(t.size());
      most_elements = std::max(most_elements, elements);
    }
    CHECK(plan.weights == most_bytes);
    CHECK(plan.parameters == most_elements);
    CHECK(plan.master == Approx(4.0 * static_cast<double>(most_elements)).epsilon(1e-3));  // empty tensors ask 4 bytes
    // The distributed optimizer: two replicas keep half the moments each (within a value a tensor).
    const dev::RankMemory halves = dev::rank_memory(full, l.tp, l.ep, l.etp, 2, l.pp);
    CHECK(halves.moments < 0.51 * plan.moments);
  }
}

TEST_CASE("pipeline stages hold every parameter once between them, and the plan's busiest stage is the larger one") {
  const ModelConfig full = model("tiny");
  const int64_t whole = parameter_count(full);
  for (int pp : {2, 3, 4}) {
    INFO("pp " << pp);
    int64_t total = 0, most = 0;
    for (int stage = 0; stage < pp; ++stage) {
      const ModelLayout layout = shard_layout(full, ModelShard::of_model_rank(1, 1, pp, stage));
      int64_t n = 0;
      for (const TensorSpec& t : layout.tensors) n += t.numel();
      total += n, most = std::max(most, n);
    }
    CHECK(total == whole);
    CHECK(dev::rank_memory(full, 1, 1, 1, 1, pp).parameters == most);
    CHECK(most < whole);
  }
}

TEST_CASE("a layout the code refuses cannot be planned, and the plan says why as the code does") {
  CHECK_THROWS_WITH(dev::rank_memory(model("tiny"), 4, 1, 1, 1), Catch::Contains("linear_num_key_heads 2 do not split over tp 4"));
  CHECK_THROWS_WITH(dev::rank_memory(model("tiny"), 2, 16, 1, 1), Catch::Contains("num_experts 16 do not split"));
  CHECK_THROWS_WITH(dev::rank_memory(model("tiny"), 2, 1, 3, 1), Catch::Contains("expert tensor parallel 3"));
  CHECK_THROWS_WITH(dev::rank_memory(model("tiny"), 1, 1, 1, 1, 8), Catch::Contains("pipeline_parallel 8 exceeds num_hidden_layers 4"));
}
