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

TEST_CASE("placement: with engine_ranks a rollout worker is a group of neighbouring ranks, its first the one that runs episodes") {
  PlacementSettings s;
  s.trainer_ranks = 1;
  s.engine_ranks = 2;
  Placement p(s, 6);  // coordinator, trainer, workers (2, 3) and (4, 5)
  CHECK(p.rollout_workers() == 2);
  CHECK(p.rollout_worker_rank(1) == 4);
  CHECK(p.rollout_worker_rank(1, 1) == 5);
  CHECK(p.rollout_worker_index(3) == 0);
  CHECK(p.rollout_worker_index(4) == 1);
  CHECK(p.engine_group_rank(4) == 0);
  CHECK(p.engine_group_rank(5) == 1);
  CHECK(p.engine_group_rank(1) == -1);
  CHECK(p.role(5) == MLPT_PROCESS_ROLE_ENGINE);
  CHECK(p.describe(4) == "rollout worker 1 (rank 4)");
  CHECK(p.describe(5) == "rollout worker 1, engine rank 1 (rank 5)");
}

TEST_CASE("placement: ranks that do not divide into engine groups are refused, naming the keys and the sizes that would") {
  PlacementSettings s;
  s.engine_ranks = 2;
  CHECK_THROWS_WITH(Placement(s, 5, "run.toml [placement]"),
                    Catch::Contains("run.toml [placement] engine_ranks = 2") && Catch::Contains("trainer_ranks = 1") &&
                        Catch::Contains("start 4 or 6"));
  CHECK_THROWS_WITH(Placement(s, 3), Catch::Contains("leaves no rollout worker of engine_ranks = 2") && Catch::Contains("start 4 or more"));
  s.engine_ranks = 0;
  CHECK_THROWS_WITH(Placement(s, 4), Catch::Contains("engine_ranks must be >= 1"));
}
