// [placement]: who does what in a run of N processes; one process alone does everything.
#include <catch2/catch.hpp>

#include "core/dist/placement.hpp"

using mlpt::dist::Placement;
using mlpt::dist::PlacementSettings;

TEST_CASE("placement: rank 0 coordinates, the next ranks train, the rest run rollouts") {
  Placement alone(PlacementSettings{}, 1);
  CHECK(alone.alone());
  CHECK(alone.role(0) == MLPT_PROCESS_ROLE_ALL);

  Placement p(PlacementSettings{2}, 6);
  CHECK(p.role(0) == MLPT_PROCESS_ROLE_HOST);
  CHECK(p.role(1) == MLPT_PROCESS_ROLE_TRAINER);
  CHECK(p.role(2) == MLPT_PROCESS_ROLE_TRAINER);
  CHECK(p.role(3) == MLPT_PROCESS_ROLE_ENGINE);
  CHECK(p.trainer_group_rank(2) == 1);
  CHECK(p.trainer_group_rank(3) == -1);
  CHECK(p.rollout_workers() == 3);
  CHECK(p.rollout_worker_index(5) == 2);
  CHECK(p.rollout_worker_rank(0) == 3);
  CHECK(p.describe(4) == "rollout worker 1 (rank 4)");
  CHECK(p.describe(1) == "trainer rank 0 (rank 1)");
}

TEST_CASE("placement: a world too small for coordinator, trainers and one rollout worker is refused, naming the key") {
  CHECK_THROWS_WITH(Placement(PlacementSettings{1}, 2), Catch::Contains("trainer_ranks = 1") && Catch::Contains("start 3 or more"));
  CHECK_THROWS_WITH(Placement(PlacementSettings{3}, 4), Catch::Contains("[placement]"));
  CHECK_NOTHROW(Placement(PlacementSettings{3}, 1));  // one process ignores the table
}
