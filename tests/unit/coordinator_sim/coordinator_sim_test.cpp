// The coordinator simulation keeps the benchmark's invariants at real scale, is a function of its
// seed, and names a placement it cannot run.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <sys/wait.h>
#include <unistd.h>

#include "bench/coordinator_sim/coordinator_simulation.hpp"
#include "bench/coordinator_sim/episode_draw.hpp"
#include "core/error.hpp"
#include "core/rules/closed_division.hpp"

using namespace mlpt::coordinator_sim;

namespace {

// Fewer steps than the default keep the test short; 19 still crosses the first evaluation (step 18).
SimulationModel short_model(int64_t steps = 19) {
  SimulationModel m;
  m.loop.steps = steps;
  return m;
}

Placement reference(int64_t trainer_nodes = 16) {
  Placement p;
  p.trainer_nodes = trainer_nodes;
  return p;
}

}  // namespace

TEST_CASE("at the reference placement every step trains 16 x 16 rollouts, never staler than the bound") {
  for (int64_t max_age : {0, 1, 2}) {
    auto model = short_model();
    model.loop.max_trajectory_age_steps = max_age;
    auto r = simulate(model, reference(), 7);
    REQUIRE(r.steps.size() == 19);
    CHECK(r.engine_replicas == 24);  // 48 engine nodes x 4 GPUs / 8 GPUs per replica
    int64_t trained = 0;
    for (const auto& s : r.steps) {
      CHECK(s.sequences == 16 * 16);
      CHECK(s.max_staleness <= static_cast<uint64_t>(max_age));
      CHECK(s.tokens > 0);
      CHECK(s.step_s() > 0);
    }
    for (const auto& [age, count] : r.staleness) {
      CHECK(age <= static_cast<uint64_t>(max_age));
      trained += count;
    }
    CHECK(trained == 19 * 256);
    CHECK(r.max_episodes_in_flight <= 256);
    CHECK(r.max_episodes_in_flight == 256);  // the reference's concurrency is reached
    // Async generation really happens when the bound allows it: some trajectories are one version old.
    if (max_age >= 1) CHECK(r.staleness.count(1) == 1);
    // pass@4 validation after step 18 and 19 only (first evaluation at 4608 samples).
    CHECK(r.validations == 2);
    for (size_t i = 0; i < r.steps.size(); ++i) CHECK((r.steps[i].validation_s > 0) == (i + 1 >= 18));
    CHECK(r.episodes == 19 * 256 + 2 * 256 * 4);
  }
}

TEST_CASE("idle fractions are fractions and the wall clock adds up") {
  for (int64_t trainer_nodes : {8, 24, 56}) {
    auto r = simulate(short_model(), reference(trainer_nodes), 3);
    CHECK(r.trainer_idle_fraction >= 0.0);
    CHECK(r.trainer_idle_fraction <= 1.0);
    CHECK(r.engine_idle_fraction >= 0.0);
    CHECK(r.engine_idle_fraction <= 1.0);
    double sum = 0;
    for (const auto& s : r.steps) sum += s.step_s() + s.validation_s;
    CHECK(std::abs(sum - r.wall_s) < 1e-6 * r.wall_s);
  }
  // Fewer engine replicas carry more sequences each and take longer per step.
  auto many = simulate(short_model(), reference(8), 3), few = simulate(short_model(), reference(56), 3);
  CHECK(few.mean_decode_batch > many.mean_decode_batch);
  CHECK(few.wall_s > many.wall_s);
}

TEST_CASE("episodes past the agent timeout end without grading and still fill their group") {
  auto model = short_model(2);
  model.episode.command_s = {120.0, 0.3};  // ~12 commands of ~2 minutes pass 1800 s
  auto r = simulate(model, reference(), 9);
  CHECK(r.agent_timeouts > 0);
  CHECK(r.steps.size() == 2);
  for (const auto& s : r.steps) CHECK(s.sequences == 256);
  CHECK(simulate(short_model(2), reference(), 9).agent_timeouts < r.agent_timeouts);
}

TEST_CASE("a run is a function of its seed") {
  auto a = simulate(short_model(4), reference(), 11), b = simulate(short_model(4), reference(), 11);
  auto c = simulate(short_model(4), reference(), 12);
  REQUIRE(a.steps.size() == b.steps.size());
  for (size_t i = 0; i < a.steps.size(); ++i) {
    CHECK(a.steps[i].step_s() == b.steps[i].step_s());
    CHECK(a.steps[i].tokens == b.steps[i].tokens);
  }
  CHECK(a.staleness == b.staleness);
  CHECK(a.wall_s == b.wall_s);
  CHECK(a.wall_s != c.wall_s);
}

TEST_CASE("episode draws respect the benchmark's limits") {
  const EpisodeModel m;
  for (int64_t p = 0; p < 2000; ++p) {
    auto w = draw_episode(m, 5, p, p % 16, p % 2 == 0);
    REQUIRE(!w.reply_tokens.empty());
    CHECK(static_cast<int64_t>(w.reply_tokens.size()) <= mlpt::rules::kMaxTurns);
    CHECK(w.reply_tokens.size() == w.command_s.size());
    for (double c : w.command_s) CHECK(c <= mlpt::rules::kCommandTimeoutSeconds);
    CHECK(w.test_s <= (p % 2 == 0 ? mlpt::rules::kValidationTestTimeoutSeconds : mlpt::rules::kTestTimeoutSeconds));
    CHECK(w.tokens <= mlpt::rules::kMaxSequenceLength);
  }
}

TEST_CASE("a placement with no engine capacity or too small a trainer group is rejected by name") {
  const SimulationModel m;
  CHECK_THROWS_WITH(simulate(m, reference(64), 1), Catch::Contains("trainer nodes 64 of 64") &&
                                                       Catch::Contains("no engine capacity"));
  // One node left: 4 GPUs, a replica needs 8.
  CHECK_THROWS_WITH(simulate(m, reference(63), 1), Catch::Contains("no engine capacity"));
  // 4 nodes cannot hold 16 bytes per parameter of a 397B model.
  CHECK_THROWS_WITH(simulate(m, reference(4), 1), Catch::Contains("trainer state needs"));
  auto bad = reference();
  bad.concurrent_episodes = 0;
  CHECK_THROWS_AS(simulate(m, bad, 1), mlpt::Error);
}

TEST_CASE("weights updated in flight skip the drain and keep the staleness bound") {
  auto drained = short_model(6), in_flight = short_model(6);
  in_flight.loop.in_flight_weight_updates = true;
  auto a = simulate(drained, reference(), 5), b = simulate(in_flight, reference(), 5);
  for (const auto& s : b.steps) {
    CHECK(s.drain_s == 0.0);
    CHECK(s.sequences == 256);
    CHECK(s.max_staleness <= 1);
  }
  CHECK(a.mixed_version == 0);  // a drained refit: every trajectory has one version
  CHECK(b.mixed_version > 0);   // episodes ran across refits
  double drain = 0;
  for (const auto& s : a.steps) drain += s.drain_s;
  CHECK(drain > 0);
  CHECK(b.engine_idle_fraction < a.engine_idle_fraction);
}

namespace {

struct Command {
  int status = -1;
  std::string output;
};

Command run_simulation(const std::string& arguments) {
  const std::string binary = std::string(MLPT_BUILD_DIR) + "/bench/coordinator_sim/bench_coordinator_simulation";
  Command c;
  FILE* pipe = popen((binary + " " + arguments + " 2>&1").c_str(), "r");
  REQUIRE(pipe);
  char buffer[4096];
  for (size_t n; (n = fread(buffer, 1, sizeof buffer, pipe)) > 0;) c.output.append(buffer, n);
  const int status = pclose(pipe);
  c.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return c;
}

}  // namespace

TEST_CASE("the command names itself a simulation, refuses a placement without engines and never overwrites") {
  auto ok = run_simulation("--trainer-nodes 16,24 --steps 2");
  CHECK(ok.status == 0);
  CHECK_THAT(ok.output, Catch::Contains("SIMULATION"));
  CHECK_THAT(ok.output, Catch::Contains("| 16 | 48 (24) |"));
  CHECK_THAT(ok.output, Catch::Contains("| 24 | 40 (20) |"));
  auto bad = run_simulation("--trainer-nodes 16,64 --steps 2");
  CHECK(bad.status == 2);
  CHECK_THAT(bad.output, Catch::Contains("no engine capacity"));
  CHECK_THAT(bad.output, !Catch::Contains("| 16 |"));  // nothing simulated when one placement is bad
  CHECK(run_simulation("--steps two").status == 2);
  const auto existing = std::filesystem::temp_directory_path() / ("coordinator_sim_test_" + std::to_string(getpid()) + ".md");
  { std::FILE* f = std::fopen(existing.c_str(), "w"); REQUIRE(f); std::fputs("a result\n", f); std::fclose(f); }
  auto refused = run_simulation("--trainer-nodes 16 --steps 1 --markdown " + existing.string());
  CHECK(refused.status == 2);
  CHECK_THAT(refused.output, Catch::Contains("never overwrites"));
  CHECK_THAT(refused.output, !Catch::Contains("| 16 |"));  // refused before simulating
  std::FILE* f = std::fopen(existing.c_str(), "r");
  char line[32] = {};
  CHECK(std::fgets(line, sizeof line, f) != nullptr);
  std::fclose(f);
  CHECK(std::string(line) == "a result\n");
  std::filesystem::remove(existing);
}
