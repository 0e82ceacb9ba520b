// A refit's row in the metrics: a sparse refit that went dense carries the reason, and reads back.
#include <catch2/catch.hpp>

#include "core/run/step_record.hpp"

using namespace mlpt;

TEST_CASE("a sparse refit that went dense says why in its metrics row, and the row reads back with it") {
  refit::RefitStats went_dense{"dense"};
  went_dense.bytes = went_dense.dense_bytes = 4096;
  went_dense.fallback =
      "refit = \"sparse\" needs the trainer's weights in host memory (they are on device type 2): refitting "
      "dense";
  const auto row = run::refit_stats_json(went_dense);
  CHECK(row.at("fallback") == went_dense.fallback);
  CHECK(run::refit_stats_from_json(row).fallback == went_dense.fallback);
  // A refit that went the way it was asked carries no fallback, and a row without one reads as such.
  const auto as_asked = run::refit_stats_json(refit::RefitStats{"delta"});
  CHECK_FALSE(as_asked.contains("fallback"));
  CHECK(run::refit_stats_from_json(as_asked).fallback.empty());
}

TEST_CASE("a sparse refit sent whole because the measured rates said so says it in its row") {
  refit::RefitStats by_rates{"full"};
  by_rates.whole_by_rates = true;
  const auto row = run::refit_stats_json(by_rates);
  CHECK(row.at("whole_by_rates") == true);
  CHECK(run::refit_stats_from_json(row).whole_by_rates);
  CHECK_FALSE(run::refit_stats_json(refit::RefitStats{"full"}).contains("whole_by_rates"));
  CHECK_FALSE(run::refit_stats_from_json(run::refit_stats_json(refit::RefitStats{"full"})).whole_by_rates);
}

TEST_CASE("a sparse delta made from the trainer's change list says so in its row") {
  refit::RefitStats listed{"delta"};
  listed.from_change_list = true;
  const auto row = run::refit_stats_json(listed);
  CHECK(row.at("from_change_list") == true);
  CHECK(run::refit_stats_from_json(row).from_change_list);
  CHECK_FALSE(run::refit_stats_json(refit::RefitStats{"delta"}).contains("from_change_list"));
  CHECK_FALSE(run::refit_stats_from_json(run::refit_stats_json(refit::RefitStats{"delta"})).from_change_list);
}
