// The group buffer: rollouts in, whole groups out in prompt order.
#include "core/rl/group_buffer.hpp"

#include <atomic>
#include <catch2/catch.hpp>
#include <thread>

#include "scored_trajectory.hpp"

using namespace mlpt;
using mlpt_test::scored_trajectory;

TEST_CASE("groups are released whole, in prompt order, whatever order rollouts finish in") {
  rl::GroupBuffer buffer(4);
  for (int s : {3, 1, 0}) buffer.add(scored_trajectory(1, s, 0, 0));
  for (int s : {0, 1, 2, 3}) buffer.add(scored_trajectory(0, s, 1, 0));
  CHECK(buffer.ready_groups() == 1);
  std::atomic<bool> stop{false};
  std::thread late([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    buffer.add(scored_trajectory(1, 2, 0, 0));
  });
  auto groups = buffer.take(0, 2, [&] { return stop.load(); });
  late.join();
  REQUIRE(groups.size() == 2);
  CHECK(groups[0].prompt_index == 0);
  CHECK(groups[1].samples[2].sample_index == 2);
  CHECK_THROWS_WITH(([&] {
                      buffer.add(scored_trajectory(5, 0, 0, 0));
                      buffer.add(scored_trajectory(5, 0, 0, 0));
                    }()),
                    Catch::Contains("arrived twice"));
  // take() gives up when stopped.
  stop = true;
  CHECK(buffer.take(7, 1, [&] { return stop.load(); }).empty());
}
