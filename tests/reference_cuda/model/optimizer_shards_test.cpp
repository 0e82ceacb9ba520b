// The distributed optimizer's split of each tensor over the data-parallel replicas
// (trainer/optimizer_shards.hpp): the ranges tile every tensor once, balanced; the replicas'
// squares add up to the whole's; each replica's AdamW update of its range is the whole update's
// on that range, bit for bit, and leaves the rest alone; under MoE parallel folding the moments the
// ranks keep are what the plan (device_model/rank_memory.hpp) counts. The collectives themselves run
// under mpirun (tests/integration/distributed: test_distributed, test_distributed_checkpoint).
#include "trainer/optimizer_shards.hpp"

#include <catch2/catch.hpp>
#include <string>
#include <vector>

#include "device_model/rank_memory.hpp"
#include "model/parallel/shard_weights.hpp"
#include "trainer/adamw.hpp"

using namespace mlpt::ref;

TEST_CASE(
    "optimizer shards: the replicas' ranges tile every tensor once, each within one element of n / "
    "replicas") {
  for (int replicas = 1; replicas <= 5; ++replicas)
    for (int64_t n : {0, 1, 2, 3, 4, 7, 100, 101, 1000003}) {
      INFO(replicas << " replicas, " << n << " elements");
      int64_t next = 0;  // where the next replica's range must begin
      for (int r = 0; r < replicas; ++r) {
        const ReplicaSplit shards(replicas, r);
        CHECK(shards.first(n) == next);
        CHECK(shards.count(n) >= n / replicas);
        CHECK(shards.count(n) <= n / replicas + 1);
        const std::vector<size_t> counts = shards.counts(n);
        REQUIRE(counts.size() == static_cast<size_t>(replicas));
        CHECK(counts[static_cast<size_t>(r)] ==
              static_cast<size_t>(shards.count(n)));  // as every replica says
        next += shards.count(n);
      }
      CHECK(next == n);
    }
}

TEST_CASE("optimizer shards: a replica outside its group is refused, naming it") {
  CHECK_THROWS_WITH(OptimizerShards(2, 2), Catch::Contains("replica 2 of 2"));
  CHECK_THROWS_WITH(OptimizerShards(0, 0), Catch::Contains("replica 0 of 0"));
  CHECK_THROWS_WITH(OptimizerShards(3, -1), Catch::Contains("replica -1 of 3"));
}

TEST_CASE(
    "optimizer shards: kept ranges put end to end are the tensor, and the ranges' squares add up to the "
    "whole's") {
  // Small integers: every square and sum is exact in double, whatever the order.
  std::vector<float> values(23);
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(static_cast<int>(i % 7) - 3);
  Weights<float> whole;
  whole.values = {values, {}, {5.0f}};
  double all = 0;
  for (float x : values) all += static_cast<double>(x) * x;
  for (int replicas : {1, 2, 3, 4}) {
    INFO(replicas << " replicas");
    std::vector<std::vector<float>> joined(whole.values.size());
    double squares = 0;
    for (int r = 0; r < replicas; ++r) {
      const OptimizerShards shards(replicas, r);
      const Weights<float> kept = shards.keep_range(whole);
      for (size_t t = 0; t < whole.values.size(); ++t)
        joined[t].insert(joined[t].end(), kept.values[t].begin(), kept.values[t].end());
      shards.add_range_squares(0, values, squares);
    }
    CHECK(joined == whole.values);
    CHECK(squares == all);
  }
}

TEST_CASE(
    "optimizer shards: each replica's AdamW update of its range is the whole update's there, bit for bit") {
  const size_t n = 37;
  auto tensor = [&](int seed) {
    std::vector<float> t(n);
    for (size_t i = 0; i < n; ++i)
      t[i] = 0.01f * static_cast<float>((static_cast<int>(i) * seed + 5) % 23 - 11);
    return t;
  };
  Weights<float> weights, grads, m, v;
  weights.values = {tensor(3), tensor(5)};
  grads.values = {tensor(7), tensor(11)};
  m.values = {tensor(13), tensor(17)};
  v.values = {tensor(2), tensor(4)};
  for (auto& t : v.values)
    for (float& x : t) x *= x;  // second moments are squares
  const std::vector<bool> trainable{true, false};
  const AdamWSettings settings{1e-3, 0.9, 0.999, 1e-8, 0.01, 0.125};
  Weights<float> updated = weights, m_all = m, v_all = v;
  adamw_update(updated, grads, m_all, v_all, 3, settings, 0.5, trainable);
  CHECK(updated.values[0] != weights.values[0]);  // the step moved the trainable tensor
  CHECK(updated.values[1] == weights.values[1]);  // and not the frozen one
  for (int replicas : {2, 3}) {
    for (int r = 0; r < replicas; ++r) {
      INFO("replica " << r << " of " << replicas);
      const OptimizerShards shards(replicas, r);
      Weights<float> mine = weights, m_mine = shards.keep_range(m), v_mine = shards.keep_range(v);
      adamw_update(mine, grads, m_mine, v_mine, 3, settings, 0.5, trainable, shards);
      const auto first = static_cast<size_t>(shards.of(0).first(n)),
                 end = first + static_cast<size_t>(shards.of(0).count(n));
      for (size_t j = 0; j < n; ++j) {
        INFO("element " << j);
        CHECK(mine.values[0][j] == (j >= first && j < end ? updated.values[0][j] : weights.values[0][j]));
      }
      CHECK(m_mine.values[0] ==
            std::vector<float>(m_all.values[0].begin() + first, m_all.values[0].begin() + end));
      CHECK(v_mine.values[0] ==
            std::vector<float>(v_all.values[0].begin() + first, v_all.values[0].begin() + end));
      CHECK(mine.values[1] == weights.values[1]);
    }
  }
}

// MoE parallel folding at a small scale of the reference placement: every rank of TP=2 x EP=2 x
// PP=2 (one or two data-parallel replicas) keeps, tensor by tensor, the ranges the trainer's split
// gives it (dense tensors over dp · ep replicas, routed experts over dp); the plan counts the
// largest of them per tensor, and with folding the dense moments shrink by the ep ranks.
TEST_CASE("optimizer shards under MoE parallel folding: the plan's moments are the ranges the ranks keep") {
  const ModelConfig full = load_model_config(std::string(MLPT_SOURCE_DIR) + "/configs/models/tiny.json");
  const int tp = 2, ep = 2, pp = 2;
  for (int dp : {1, 2}) {
    INFO("dp " << dp);
    double busiest_kept = 0;
    for (int r = 0; r < tp * ep * pp; ++r) {
      const ModelShard s = ModelShard::of_model_rank(tp, ep, pp, r);
      const ModelLayout layout = shard_layout(full, s);
      const Weights<float> zeros = zeros_like_layout<float>(shard_config(full, s), layout);
      std::vector<size_t> largest(layout.tensors.size(), 0);  // per tensor, over the replicas
      for (int d = 0; d < dp; ++d) {
        const OptimizerShards shards(ReplicaSplit(dp * ep, d * ep + s.ep_rank), nullptr, ReplicaSplit(dp, d),
                                     nullptr, routed_expert_tensors(layout));
        const Weights<float> kept = shards.keep_range(zeros);
        for (size_t i = 0; i < kept.values.size(); ++i)
          largest[i] = std::max(largest[i], kept.values[i].size());
      }
      double kept_bytes = 0;
      for (size_t n : largest) kept_bytes += 2.0 * 4.0 * static_cast<double>(std::max<size_t>(n, 1));
      const dev::RankMemory plan = dev::rank_memory_of(full, s, dp, /*moe_parallel_folding=*/true);
      CHECK(plan.moments == kept_bytes);
      CHECK(plan.master == kept_bytes / 2);  // the masters split as the moments
      busiest_kept = std::max(busiest_kept, kept_bytes);
      // Folding splits the dense tensors' moments over ep times as many replicas.
      CHECK(plan.moments < dev::rank_memory_of(full, s, dp).moments);
    }
    CHECK(dev::rank_memory(full, tp, ep, 1, dp, pp, true, true).moments == busiest_kept);
  }
}
