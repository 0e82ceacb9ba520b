// The benchmark constants and formulas against the table of docs/benchmark.md §2, each formula also
// against a second, independent computation.
#include <catch2/catch.hpp>

#include <cmath>

#include "core/rules/closed_division.hpp"

namespace r = mlpt::rules;

TEST_CASE("rules: first eval point matches the §2 table", "[rules]") {
  CHECK(r::first_eval_samples(256) == 4608);
  CHECK(r::first_eval_samples(512) == 5120);
  CHECK(r::first_eval_samples(1024) == 7168);
  static_assert(r::first_eval_samples(512) == 5120, "usable at compile time");
}

TEST_CASE("rules: integer first-eval formula equals the floating formula GBS*ceil(2.5+3840/GBS)", "[rules]") {
  for (int64_t g = 1; g <= 8192; ++g) {
    const auto reference = g * static_cast<int64_t>(std::ceil(2.5 + 3840.0 / static_cast<double>(g)));
    INFO("GBS " << g);
    REQUIRE(r::first_eval_samples(g) == reference);
  }
}

TEST_CASE("rules: eval points are the first point and every GBS after, never at start", "[rules]") {
  CHECK(r::eval_samples_at(512, 0) == 5120);
  CHECK(r::eval_samples_at(512, 3) == 5120 + 3 * 512);
  CHECK_FALSE(r::is_eval_point(512, 0));
  CHECK_FALSE(r::is_eval_point(512, 4608));
  CHECK(r::is_eval_point(512, 5120));
  CHECK(r::is_eval_point(512, 5632));
  CHECK_FALSE(r::is_eval_point(512, 5633));
  CHECK_FALSE(r::is_eval_point(0, 0));
}

TEST_CASE("rules: LR and gradient clip match the §2 table", "[rules]") {
  // Table values are rounded to 11 significant digits.
  CHECK(r::learning_rate(256) == 1.0e-6);
  CHECK(std::fabs(r::learning_rate(512) - 1.4142135624e-6) < 1e-16);
  CHECK(r::learning_rate(1024) == 2.0e-6);
  CHECK(r::gradient_clip_norm(256) == 0.125);
  CHECK(std::fabs(r::gradient_clip_norm(512) - 0.08838834765) < 1e-11);
  CHECK(r::gradient_clip_norm(1024) == 0.0625);
  // Second computation: LR·clip is constant (1.25e-7) across GBS.
  for (int64_t g : {256, 384, 512, 768, 1024, 2048})
    CHECK(std::fabs(r::learning_rate(g) * r::gradient_clip_norm(g) - 1.25e-7) < 1e-20);
}

TEST_CASE("rules: batch split, table GBS values and target are strict", "[rules]") {
  CHECK(r::prompts_per_step(256) == 16);
  CHECK(r::prompts_per_step(512) == 32);
  CHECK(r::prompts_per_step(1024) == 64);
  CHECK(r::global_batch_size(32) == 512);
  CHECK(r::is_allowed_global_batch_size(256));
  CHECK(r::is_allowed_global_batch_size(1024));
  CHECK_FALSE(r::is_allowed_global_batch_size(768));
  CHECK_FALSE(r::reached_target(0.69));
  CHECK(r::reached_target(0.6900001));
  CHECK(r::within_tolerance(1e-6 + 5e-10, 1e-6));
  CHECK_FALSE(r::within_tolerance(1e-6 + 2e-9, 1e-6));
  CHECK(r::init_time_limit_minutes(false) == 30);
  CHECK(r::init_time_limit_minutes(true) == 240);
  CHECK(r::kRunsPerSubmission == 3);
  CHECK(r::kTisLowerBound < 1.0);
  CHECK(r::kTisUpperBound > 1.0);
}
