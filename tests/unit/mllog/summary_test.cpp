// The submission score: olympic average of the runs' times to train, and its refusals.
#include <catch2/catch.hpp>

#include <cmath>

#include "core/check/summary.hpp"
#include "core/error.hpp"
#include "core/mllog/keys.hpp"
#include "simulated_run.hpp"

using namespace mlpt;

namespace {

check::LogReport report_of(const test::SimulatedRun& run, std::string name, void (*edit)(test::LogLines&) = nullptr) {
  auto log = test::simulate_run(run);
  if (edit) edit(log);
  auto parsed = log.parse();
  parsed.source = std::move(name);
  return check::check_log(parsed);
}

}  // namespace

TEST_CASE("summary: olympic average of 3 known times drops fastest and slowest", "[summary]") {
  CHECK(check::olympic_average({30.0, 10.0, 20.0}) == 20.0);
  CHECK(check::olympic_average({100.5, 99.25, 250.0}) == 100.5);
  // One non-converged run is the slowest and is dropped.
  CHECK(check::olympic_average({10.0, std::nullopt, 20.0}) == 20.0);
  // More runs than the benchmark's 3: drop one at each end, average the rest.
  CHECK(check::olympic_average({1.0, 2.0, 3.0, 4.0, 100.0}) == 3.0);
}

TEST_CASE("summary: refuses when more than one run did not converge, or too few runs", "[summary]") {
  CHECK_THROWS_WITH(check::olympic_average({10.0, std::nullopt, std::nullopt}),
                    Catch::Contains("2 of 3 runs did not converge"));
  CHECK_THROWS_AS(check::olympic_average({std::nullopt, std::nullopt, std::nullopt}), Error);
  CHECK_THROWS_WITH(check::olympic_average({10.0, 20.0}), Catch::Contains("at least 3 runs"));
}

TEST_CASE("summary: three simulated runs give the middle time", "[summary]") {
  std::vector<check::LogReport> runs;
  std::vector<double> expected;
  int64_t seed = 1;
  for (int64_t step_minutes : {9, 7, 11}) {
    test::SimulatedRun run{.seed = seed++, .step_ms = step_minutes * 60 * 1000};
    expected.push_back(test::expected_minutes(run));
    runs.push_back(report_of(run, "run" + std::to_string(seed)));
  }
  auto s = check::summarize(runs);
  INFO(s.refusal);
  REQUIRE(s.scored());
  CHECK(std::fabs(*s.score_minutes - expected[0]) < 1e-9);  // 9-minute steps are the middle run
  CHECK(s.notes.empty());
  auto j = check::to_json(s);
  CHECK(j["scored"] == true);
  CHECK(j["runs"].size() == 3);
  CHECK_THAT(check::format_summary(s), Catch::Contains("olympic average"));
}

TEST_CASE("summary: one non-converged run is dropped, two refuse the score", "[summary]") {
  test::SimulatedRun fast{.seed = 1, .step_ms = 5 * 60 * 1000};
  test::SimulatedRun mid{.seed = 2, .step_ms = 8 * 60 * 1000};
  test::SimulatedRun failed{.seed = 3, .accuracies = {0.5, 0.6, 0.65}};
  auto s = check::summarize({report_of(fast, "fast"), report_of(mid, "mid"), report_of(failed, "failed")});
  INFO(s.refusal);
  REQUIRE(s.scored());
  CHECK(std::fabs(*s.score_minutes - test::expected_minutes(mid)) < 1e-9);

  test::SimulatedRun failed2{.seed = 4, .accuracies = {0.5, 0.6, 0.69}};
  auto refused = check::summarize({report_of(fast, "fast"), report_of(failed, "failed"), report_of(failed2, "failed2")});
  CHECK_FALSE(refused.scored());
  CHECK_THAT(refused.refusal, Catch::Contains("2 of 3 runs did not converge"));
  CHECK_THAT(check::format_summary(refused), Catch::Contains("no score"));
}

TEST_CASE("summary: refuses non-compliant runs and repeated seeds", "[summary]") {
  test::SimulatedRun a{.seed = 1}, b{.seed = 2}, c{.seed = 3};
  auto bad_lr = report_of(c, "bad_lr", [](test::LogLines& log) {
    log.set_value(mllog::keys::kOptBaseLearningRate, 1e-5);
  });
  auto s = check::summarize({report_of(a, "a"), report_of(b, "b"), bad_lr});
  CHECK_FALSE(s.scored());
  CHECK_THAT(s.refusal, Catch::Contains("bad_lr is not compliant"));

  test::SimulatedRun same{.seed = 1};
  auto dup = check::summarize({report_of(a, "a"), report_of(b, "b"), report_of(same, "same")});
  CHECK_FALSE(dup.scored());
  CHECK_THAT(dup.refusal, Catch::Contains("seed 1"));
}

TEST_CASE("summary: another run count is scored with a note, fewer than 3 refused", "[summary]") {
  std::vector<check::LogReport> five;
  for (int64_t i = 1; i <= 5; ++i) five.push_back(report_of({.seed = i, .step_ms = i * 60 * 1000}, "r" + std::to_string(i)));
  auto s = check::summarize(five);
  REQUIRE(s.scored());
  REQUIRE(s.notes.size() == 1);
  CHECK_THAT(s.notes[0], Catch::Contains("requires exactly 3"));
  double mean = (test::expected_minutes({.step_ms = 2 * 60 * 1000}) + test::expected_minutes({.step_ms = 3 * 60 * 1000}) +
                 test::expected_minutes({.step_ms = 4 * 60 * 1000})) / 3.0;
  CHECK(std::fabs(*s.score_minutes - mean) < 1e-9);
  auto two = check::summarize({five[0], five[1]});
  CHECK_FALSE(two.scored());
  CHECK_THAT(two.refusal, Catch::Contains("at least 3"));
}
