// The coordinator's data-parallel split: the trainer ranks of one replica (a model-parallel group)
// get the same batch share byte for byte, the replicas' shares cover the batch once, replica 0's
// ranks publish, and a layout the ranks disagree on is refused naming the rank.
#include <catch2/catch.hpp>

#include "core/dist/run_messages.hpp"
#include "core/dist/trainer_replicas.hpp"
#include "packed_batch.hpp"  // tests/unit/rl

using mlpt::dist::TrainerReplicas;

namespace {

// The group rank order of the reference trainer: dp_rank * (tp * ep) + rank in the model-parallel group.
std::vector<TrainerReplicas::Replica> model_parallel(int dp, int per_replica) {
  std::vector<TrainerReplicas::Replica> r;
  for (int g = 0; g < dp * per_replica; ++g) r.push_back({g / per_replica, dp});
  return r;
}

}  // namespace

TEST_CASE("trainer replicas: TP2 x DP2 ranks 0,1 train share 0 and publish, ranks 2,3 train share 1") {
  TrainerReplicas r(model_parallel(2, 2));
  CHECK(r.shares() == 2);
  CHECK(r.ranks_per_replica() == 2);
  CHECK(r.model_parallel());
  CHECK(r.share_of(0) == 0);
  CHECK(r.share_of(1) == 0);
  CHECK(r.share_of(2) == 1);
  CHECK(r.share_of(3) == 1);
  CHECK(r.publishers() == std::vector<int>{0, 1});
  CHECK(r.sender_rank(1) == 1);
  CHECK(r.sender_rank(2) == -1);
}

TEST_CASE("trainer replicas: plain data parallelism is a share and a replica per rank, rank 0 alone publishing") {
  TrainerReplicas r({{0, 3}, {1, 3}, {2, 3}});
  CHECK(r.shares() == 3);
  CHECK_FALSE(r.model_parallel());
  CHECK(r.share_of(2) == 2);
  CHECK(r.publishers() == std::vector<int>{0});
  TrainerReplicas tp4({{0, 1}, {0, 1}, {0, 1}, {0, 1}});  // one replica of four ranks: all publish
  CHECK(tp4.shares() == 1);
  CHECK(tp4.publishers() == std::vector<int>{0, 1, 2, 3});
}

TEST_CASE("trainer replicas: the ranks of a replica get the same bytes and the replicas cover the batch once") {
  mlpt_test::PackedBatch batch({3, 5, 2, 7, 4, 4}, 1);
  TrainerReplicas r(model_parallel(2, 2));
  const auto shares = mlpt::dist::encoded_shares(batch.abi, r.shares());
  REQUIRE(shares.size() == 2);
  // What each of the four ranks is sent, as the coordinator sends it.
  std::vector<std::vector<uint8_t>> sent;
  for (int g = 0; g < r.ranks(); ++g) sent.push_back(nlohmann::json::to_cbor(shares[static_cast<size_t>(r.share_of(g))]));
  CHECK(sent[0] == sent[1]);
  CHECK(sent[2] == sent[3]);
  CHECK(sent[0] != sent[2]);
  // Decoded, replica 0 then replica 1 are the batch's sequences in order, each once.
  std::vector<int32_t> tokens;
  std::vector<float> advantages;
  for (const auto& share : shares) {
    mlpt::dist::DecodedBatch d;
    mlpt::dist::batch_from(share, d);
    CHECK(d.abi.num_sequences > 0);
    tokens.insert(tokens.end(), d.tokens.begin(), d.tokens.end());
    advantages.insert(advantages.end(), d.advantages.begin(), d.advantages.end());
  }
  CHECK(tokens == batch.tokens);
  CHECK(advantages == batch.advantages);
}

TEST_CASE("trainer replicas: ranks that disagree, or replicas of different sizes, are refused naming the rank") {
  CHECK_THROWS_WITH(TrainerReplicas({{0, 2}, {0, 1}}), Catch::Contains("trainer rank 1") && Catch::Contains("trainer rank 0 says 2"));
  CHECK_THROWS_WITH(TrainerReplicas({{0, 2}, {2, 2}}), Catch::Contains("trainer rank 1") && Catch::Contains("replica 2 of 2"));
  CHECK_THROWS_WITH(TrainerReplicas({{0, 2}, {0, 2}, {1, 2}}), Catch::Contains("replica 0") && Catch::Contains("has 2 ranks"));
  CHECK_THROWS_WITH(TrainerReplicas({{0, 2}, {0, 2}, {0, 2}, {1, 2}}), Catch::Contains("replica 0") && Catch::Contains("has 3 ranks"));
}
