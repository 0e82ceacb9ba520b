// The rollout scheduler: the staleness bound on which step may start, pause, stop and try_next.
#include "core/rl/rollout_scheduler.hpp"

#include <atomic>
#include <catch2/catch.hpp>
#include <thread>

using namespace mlpt;

TEST_CASE("the scheduler starts step s only once version >= s - max_age") {
  rl::RolloutScheduler sched(/*prompts_per_step=*/2, /*generations=*/2, /*max_age=*/1, /*max_steps=*/3);
  // Steps 0 and 1 may start at version 0 (4 prompts x 2 samples = 8 jobs); step 2 must wait.
  for (int i = 0; i < 8; ++i) {
    auto job = sched.next();
    REQUIRE(job);
    CHECK(job->prompt_index == i / 2);
    CHECK(job->sample_index == i % 2);
  }
  std::atomic<bool> started{false};
  std::thread waiter([&] {
    auto j = sched.next();
    started = j.has_value() && j->prompt_index == 4;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  CHECK_FALSE(started.load());
  sched.set_weight_version(1);
  waiter.join();
  CHECK(started.load());
  CHECK(sched.in_flight() == 9);
  for (int i = 0; i < 9; ++i) sched.done();
  sched.wait_idle();
  // Pause holds new starts until resume; stop releases waiters with nothing.
  sched.pause();
  std::thread paused([&] { CHECK_FALSE(sched.next().has_value()); });
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  sched.stop();
  paused.join();
}

TEST_CASE("try_next follows next's policy without waiting") {
  rl::RolloutScheduler sched(/*prompts_per_step=*/1, /*generations=*/2, /*max_age=*/0, /*max_steps=*/2);
  REQUIRE(sched.try_next());
  REQUIRE(sched.try_next());
  CHECK_FALSE(sched.try_next());  // step 1 needs version 1
  sched.set_weight_version(1);
  sched.pause();
  CHECK_FALSE(sched.try_next());  // paused
  sched.resume();
  auto job = sched.try_next();
  REQUIRE(job);
  CHECK(job->prompt_index == 1);
  CHECK(sched.try_next());
  CHECK_FALSE(sched.try_next());  // every step handed out
  CHECK(sched.in_flight() == 4);
}
