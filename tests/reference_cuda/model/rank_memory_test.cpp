// The memory a rank of the device components allocates, as `mlpt model plan` states it
// (device_model/rank_memory.hpp), against what the code allocates: every rank of each layout
// uploads its shard through allocate_weights on the CPU backend, which counts the bytes asked of
// it, and the busiest rank's bytes and elements must be the plan's exactly, with the vocabulary
// split over the TP ranks (as every component holds it: the device model's head computes over the
// rows its shard holds) and whole (the comparison the plan prints); a layout the code refuses
// cannot be planned.
#include "device_model/rank_memory.hpp"

#include <algorithm>
#include <catch2/catch.hpp>
#include <string>

#include "backends/cpu/bf16_ops.hpp"
#include "device_model/model.hpp"
#include "device_model/vocab_head.hpp"
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
    int64_t vocab = 0;  // > 0: the config's vocabulary size replaced (one tp does not divide)
  };
  for (const Layout& l :
       {Layout{"tiny", 1, 1, 1}, Layout{"tiny", 2, 1, 1}, Layout{"tiny", 2, 2, 1}, Layout{"tiny", 2, 2, 2},
        Layout{"tiny", 1, 4, 1}, Layout{"tiny-tp8", 4, 1, 1}, Layout{"tiny-tp8", 4, 2, 1},
        Layout{"tiny", 1, 1, 1, 2}, Layout{"tiny", 2, 2, 1, 2}, Layout{"tiny-tp8", 4, 1, 1, 2},
        Layout{"tiny", 1, 1, 1, 3}, Layout{"tiny", 2, 1, 1, 1, 1151}, Layout{"tiny-tp8", 4, 2, 1, 2, 1151}}) {
    INFO(l.model << " tp " << l.tp << " ep " << l.ep << " etp " << l.etp << " pp " << l.pp << " vocab "
                 << l.vocab);
    ModelConfig full = model(l.model);
    if (l.vocab > 0) full.vocab_size = l.vocab;
    const Weights<float> whole = init_weights<float>(full, 5);
    const dev::RankMemory plan = dev::rank_memory(full, l.tp, l.ep, l.etp, 1, l.pp);
    const dev::RankMemory whole_vocab =
        dev::rank_memory(full, l.tp, l.ep, l.etp, 1, l.pp, /*vocab_parallel=*/false);
    // The busiest rank's bytes and elements of every rank's shard, vocabulary split or whole.
    auto allocated = [&](bool vocab_parallel) {
      std::pair<double, int64_t> most{0, 0};
      for (int r = 0; r < l.tp * l.ep * l.pp; ++r) {
        ModelShard s = ModelShard::of_model_rank(l.tp, l.ep, l.pp, r, l.etp);
        s.vocab_parallel = vocab_parallel;
        const Weights<float> shard = shard_weights(whole, s);
        cpu::Bf16Ops ops;
        const dev::DeviceWeights uploaded = dev::upload_weights(ops, shard);
        most.first = std::max(most.first, static_cast<double>(ops.live_bytes()));
        int64_t elements = 0;
        for (const std::vector<float>& t : shard.values) elements += static_cast<int64_t>(t.size());
        // The device model's embedding and LM head (vocab_head.hpp) run over the rows allocated.
        const int64_t head_rows =
            dev::VocabHead(shard.config, nullptr, full.vocab_size).width() * full.hidden_size;
        if (s.first_stage()) CHECK(shard.values[size_t(shard.layout.embed)].size() == size_t(head_rows));
        if (s.last_stage()) CHECK(shard.values[size_t(shard.layout.lm_head)].size() == size_t(head_rows));
        most.second = std::max(most.second, elements);
      }
      return most;
    };
    const auto [most_bytes, most_elements] = allocated(true);
    CHECK(plan.weights == most_bytes);
    CHECK(plan.parameters == most_elements);
    const auto [whole_bytes, whole_elements] = allocated(false);
    CHECK(whole_vocab.weights == whole_bytes);
    CHECK(whole_vocab.parameters == whole_elements);
    if (l.tp > 1 && l.pp == 1) {  // TP rank 0 holds ceil(V / tp) of the embedding's and LM head's V rows
      const int64_t V = full.vocab_size, H = full.hidden_size;
      CHECK(whole_vocab.parameters - plan.parameters == 2 * H * (V - (V + l.tp - 1) / l.tp));
    }
    CHECK(plan.master ==
          Approx(4.0 * static_cast<double>(most_elements)).epsilon(1e-3));  // empty tensors ask 4 bytes
    // The distributed optimizer: two replicas keep half the masters and moments each (within a
    // value a tensor); the working weights and gradients stay whole.
    const dev::RankMemory halves = dev::rank_memory(full, l.tp, l.ep, l.etp, 2, l.pp);
    CHECK(halves.moments < 0.51 * plan.moments);
    CHECK(halves.master < 0.51 * plan.master);
    CHECK(halves.master * 2 == halves.moments);
    CHECK(halves.weights == plan.weights);
    CHECK(halves.gradients == plan.gradients);
  }
}

TEST_CASE(
    "pipeline stages hold every parameter once between them, and the plan's busiest stage is the larger "
    "one") {
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
  CHECK_THROWS_WITH(dev::rank_memory(model("tiny"), 4, 1, 1, 1),
                    Catch::Contains("linear_num_key_heads 2 do not split over tp 4"));
  CHECK_THROWS_WITH(dev::rank_memory(model("tiny"), 2, 16, 1, 1),
                    Catch::Contains("num_experts 16 do not split"));
  CHECK_THROWS_WITH(dev::rank_memory(model("tiny"), 2, 1, 3, 1), Catch::Contains("expert tensor parallel 3"));
  CHECK_THROWS_WITH(dev::rank_memory(model("tiny"), 1, 1, 1, 1, 8),
                    Catch::Contains("pipeline_parallel 8 exceeds num_hidden_layers 4"));
}
