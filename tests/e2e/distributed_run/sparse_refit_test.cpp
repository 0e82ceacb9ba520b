// The sparse refit across processes: on trainer rank 0 the sparse transport plugin wrapping the UCX
// sender encodes each version as what changed since the last one, UCX carries it to both rollout
// workers, and each worker's sparse receiver rebuilds the weights against the version it holds,
// checking every tensor against the sender's checksum (a mismatch fails the worker, which the run
// would show as a lost worker). Full versions come first, every full_refit_every_steps refits and
// when the sender's measured rates say whole is quicker.
#include <catch2/catch.hpp>

#include <algorithm>

#include <nlohmann/json.hpp>

#include "distributed_support.hpp"

namespace fs = std::filesystem;
using namespace dist_run_test;

TEST_CASE("sparse refit in a distributed run: deltas reach both engines and rebuild bit for bit") {
  require_tiny_model();
  mlpt_test::TempDir dir("sparse_refit");
  const fs::path out = fs::path(dir.str()) / "run", config = fs::path(dir.str()) / "sparse.toml";
  write_tiny_config(config, out,
                    {{"checkpoint_every_steps = ",
                      "checkpoint_every_steps = 0\nrefit = \"sparse\"\nfull_refit_every_steps = 3"},
                     {"max_steps = ", "max_steps = 5"},
                     {"first_eval_samples = ", "first_eval_samples = 64000"}});
  int status = 0;
  const std::string output =
      mlpt_test::run_command(launch("sparse-refit", 600, false) + config.string() + " 2>&1", &status);
  INFO(output);
  REQUIRE((WEXITSTATUS(status) == 0 || WEXITSTATUS(status) == 1));

  std::ifstream metrics(out / "metrics.jsonl");
  std::vector<std::string> modes;
  int64_t since_full = 0;  // refits since the last full one (full_refit_every_steps counts from there)
  for (std::string line; std::getline(metrics, line);) {
    auto j = nlohmann::json::parse(line);
    const auto& refit = j["refit"];
    modes.push_back(refit["mode"]);
    // Full when due (the first, every third after the last full one) or when the rates the sender
    // measured say whole is quicker (never before it has measured a delta); a delta otherwise.
    const bool due = modes.size() == 1 || since_full >= 3, by_rates = refit.value("whole_by_rates", false);
    CHECK(refit["mode"] == (due || by_rates ? "full" : "delta"));
    if (due || modes.size() == 2) CHECK_FALSE(by_rates);
    since_full = refit["mode"] == "full" ? 1 : since_full + 1;
    INFO("step " << j["step"] << ": " << refit.dump());
    CHECK(j["lost_rollout_workers"] == 0);
    CHECK(j["failed_rollouts"] == 0);
    CHECK(refit["elements"].get<int64_t>() > 0);
    if (refit["mode"] == "delta") {
      // The tiny model changes a little per step: a delta is smaller than the weights.
      CHECK(refit["bytes"].get<int64_t>() < refit["dense_bytes"].get<int64_t>());
      CHECK(refit["changed_elements"].get<int64_t>() <= refit["elements"].get<int64_t>());
    }
  }
  REQUIRE(modes.size() == 5);
  CHECK(modes[0] == "full");
  CHECK(modes[1] == "delta");  // the sender has measured no delta yet: the one due is sent
  CHECK(std::count(modes.begin(), modes.end(), "full") >= 2);  // full_refit_every_steps = 3, or by rates
}

// The device trainer (qwen35_bf16: bf16 emulated on the CPU) on two data-parallel ranks with its
// masters split exports its working weights and marks what each step changed in them; the sparse
// sender then sends only the marked elements, nothing compared. check_change_lists makes the sender
// compare all the same and fail the refit (and the run) if a list left a change unmarked.
TEST_CASE("sparse refit from the trainer's change list: qwen35_bf16 on two replicas marks its changes") {
  require_tiny_model();
  mlpt_test::TempDir dir("sparse_refit_marked");
  const fs::path out = fs::path(dir.str()) / "run", config = fs::path(dir.str()) / "marked.toml";
  write_tiny_config(config, out,
                    {{"checkpoint_every_steps = ",
                      "checkpoint_every_steps = 0\nrefit = \"sparse\"\nfull_refit_every_steps = 0\n"
                      "check_change_lists = true"},
                     {"max_steps = ", "max_steps = 4"},
                     {"learning_rate = ", "learning_rate = 1e-5"},
                     {"first_eval_samples = ", "first_eval_samples = 64000"},
                     {"trainer_ranks = ", "trainer_ranks = 2"},
                     {"receivers = ", "receivers = 1"},
                     {"name = \"qwen35_cpu\"\n[components.trainer.settings]",
                      "name = \"qwen35_bf16\"\n[components.trainer.settings]"}});
  int status = 0;
  const std::string output =
      mlpt_test::run_command(launch("sparse-refit-marked", 600, false) + config.string() + " 2>&1", &status);
  INFO(output);
  REQUIRE((WEXITSTATUS(status) == 0 || WEXITSTATUS(status) == 1));
  std::ifstream metrics(out / "metrics.jsonl");
  int rows = 0, marked = 0;
  for (std::string line; std::getline(metrics, line); ++rows) {
    const auto j = nlohmann::json::parse(line);
    const auto& refit = j["refit"];
    INFO("step " << j["step"] << ": " << refit.dump());
    CHECK(j["lost_rollout_workers"] == 0);
    if (rows == 0) {
      CHECK(refit["mode"] == "full");  // nothing published before: no list yet
      continue;
    }
    // Every later version from the trainer's list (checked against a comparison by the sender).
    CHECK(refit["mode"] == "delta");
    CHECK(refit.value("from_change_list", false));
    CHECK(refit["changed_elements"].get<int64_t>() < refit["elements"].get<int64_t>());
    CHECK(refit["bytes"].get<int64_t>() < refit["dense_bytes"].get<int64_t>());
    marked += refit.value("from_change_list", false) ? 1 : 0;
  }
  REQUIRE(rows == 4);
  CHECK(marked == 3);
}
