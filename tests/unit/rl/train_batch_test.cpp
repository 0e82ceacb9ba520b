// The packed train batch: every sequence kept, tokens packed, advantages and staleness recorded.
#include "core/rl/train_batch.hpp"

#include <catch2/catch.hpp>

#include "scored_trajectory.hpp"

using namespace mlpt;
using mlpt_test::scored_trajectory;

TEST_CASE("the train batch keeps every sequence, packs tokens and records staleness") {
  std::vector<rl::Group> groups(2);
  for (int s = 0; s < 4; ++s)
    groups[0].samples.push_back(scored_trajectory(0, s, s == 0 ? 1.0 : 0.0, 2, 3 + s));
  for (int s = 0; s < 4; ++s) groups[1].samples.push_back(scored_trajectory(1, s, 0.0, 3));
  rl::TrainBatch batch(groups, 1e-6, /*current_version=*/3, false, 0, 0);
  const auto* b = batch.abi();
  CHECK(b->num_sequences == 8);
  CHECK(b->offsets[1] == 3);
  CHECK(b->offsets[4] == 3 + 4 + 5 + 6);
  CHECK(b->tokens[3] == 0);         // second sequence starts again at its own first token
  CHECK(b->advantages[0] == 1.0f);  // lone success, others all 0: not divided
  for (int i = 4; i < 8; ++i) CHECK(b->advantages[i] == 0.0f);  // all-zero group stays, with A = 0
  CHECK(batch.statistics().zero_advantage_groups == 1);
  CHECK(batch.statistics().max_staleness == 1);
  CHECK(batch.statistics().trainable_tokens == (2 + 3 + 4 + 5) + 4 * 2);
  CHECK(b->routed_experts == nullptr);
}
