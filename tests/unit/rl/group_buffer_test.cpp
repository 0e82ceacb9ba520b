// The group buffer, the scheduler's staleness bound and the packed train batch.
#include <catch2/catch.hpp>

#include <atomic>
#include <thread>

#include "core/rl/group_buffer.hpp"
#include "core/rl/rollout_scheduler.hpp"
#include "core/rl/train_batch.hpp"

using namespace mlpt;

namespace {
rollout::Trajectory make(int64_t prompt, int32_t sample, double reward, uint64_t version, int len = 3) {
  rollout::Trajectory t;
  t.prompt_index = prompt;
  t.sample_index = sample;
  t.reward = reward;
  t.min_weight_version = t.max_weight_version = version;
  for (int i = 0; i < len; ++i) {
    t.tokens.push_back(100 * static_cast<int32_t>(prompt) + i);
    t.loss_mask.push_back(i > 0);
    t.generation_logprobs.push_back(i > 0 ? -0.5f : 0.0f);
  }
  return t;
}
}  // namespace

TEST_CASE("groups are released whole, in prompt order, whatever order rollouts finish in") {
  rl::GroupBuffer buffer(4);
  for (int s : {3, 1, 0}) buffer.add(make(1, s, 0, 0));
  for (int s : {0, 1, 2, 3}) buffer.add(make(0, s, 1, 0));
  CHECK(buffer.ready_groups() == 1);
  std::atomic<bool> stop{false};
  std::thread late([&] { std::this_thread::sleep_for(std::chrono::milliseconds(50)); buffer.add(make(1, 2, 0, 0)); });
  auto groups = buffer.take(0, 2, [&] { return stop.load(); });
  late.join();
  REQUIRE(groups.size() == 2);
  CHECK(groups[0].prompt_index == 0);
  CHECK(groups[1].samples[2].sample_index == 2);
  CHECK_THROWS_WITH(([&] { buffer.add(make(5, 0, 0, 0)); buffer.add(make(5, 0, 0, 0)); }()), Catch::Contains("arrived twice"));
  // take() gives up when stopped.
  stop = true;
  CHECK(buffer.take(7, 1, [&] { return stop.load(); }).empty());
}

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
  std::thread waiter([&] { auto j = sched.next(); started = j.has_value() && j->prompt_index == 4; });
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

TEST_CASE("the train batch keeps every sequence, packs tokens and records staleness") {
  std::vector<rl::Group> groups(2);
  for (int s = 0; s < 4; ++s) groups[0].samples.push_back(make(0, s, s == 0 ? 1.0 : 0.0, 2, 3 + s));
  for (int s = 0; s < 4; ++s) groups[1].samples.push_back(make(1, s, 0.0, 3));
  rl::TrainBatch batch(groups, 1e-6, /*current_version=*/3, false, 0, 0);
  const auto* b = batch.abi();
  CHECK(b->num_sequences == 8);
  CHECK(b->offsets[1] == 3);
  CHECK(b->offsets[4] == 3 + 4 + 5 + 6);
  CHECK(b->tokens[3] == 0);  // second sequence starts again at its own first token
  CHECK(b->advantages[0] == 1.0f);  // lone success, others all 0: not divided
  for (int i = 4; i < 8; ++i) CHECK(b->advantages[i] == 0.0f);  // all-zero group stays, with A = 0
  CHECK(batch.statistics().zero_advantage_groups == 1);
  CHECK(batch.statistics().max_staleness == 1);
  CHECK(batch.statistics().trainable_tokens == (2 + 3 + 4 + 5) + 4 * 2);
  CHECK(b->routed_experts == nullptr);
}
