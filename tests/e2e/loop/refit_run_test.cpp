// The refit inside the real run (letters task, tiny reference model, in-process transport). Both
// modes go plugin to plugin, so the host sees only what the trainer exported: dense through the
// run's transport, sparse through the sparse transport plugin wrapping it, whose receiver checks
// every rebuilt tensor against the sender's checksum and fails the refit (and the run) on any
// difference; that the engine gets the weights bit for bit is test_sparse_transport's and
// test_weight_flow's. The metrics rows and the report say how many bytes each refit moved.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <unistd.h>

#include "core/run/benchmark_run.hpp"
#include "mlpt/sdk/types.hpp"

using namespace mlpt;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

struct Observed {
  int64_t refits = 0;
  uint64_t bytes = 0;  // exported, over every refit
};

// Runs `steps` steps of configs/tiny.toml with the given refit mode, comparing at every refit.
std::pair<Observed, std::vector<json>> run_letters(const std::string& mode, int64_t steps, std::string& report) {
  const std::string cache = MLPT_CACHE_DIR;
  if (!fs::exists(cache + "/models/tiny/config.json")) FAIL("missing " << cache << "/models/tiny: run scripts/prepare-tiny.sh");
  setenv("MLPT_CACHE_DIR", cache.c_str(), 1);
  setenv("MLPT_PLUGIN_PATH", MLPT_PLUGIN_DIR, 1);
  auto c = run::read_run_config(std::string(MLPT_SOURCE_DIR) + "/configs/tiny.toml");
  c.run.output_dir = fs::temp_directory_path() / ("mlpt-refit-" + mode + "-" + std::to_string(::getpid()));
  fs::remove_all(c.run.output_dir);
  c.run.refit = mode;
  c.run.full_refit_every_steps = 3;
  c.run.checkpoint_every_steps = 0;
  c.benchmark.max_steps = steps;
  c.benchmark.first_eval_samples = 1000 * c.benchmark.global_batch_size;  // no validation
  Observed o;
  run::RunOptions options;
  options.progress = [](const std::string&) {};
  options.after_refit = [&](uint64_t, const mlpt_named_tensor* exported, size_t n) {
    ++o.refits;
    for (size_t i = 0; i < n; ++i) o.bytes += mlpt::sdk::nbytes(exported[i].tensor);
  };
  auto s = run::run_benchmark(c, options);
  INFO("abort reason: " << s.abort_reason);
  REQUIRE(s.abort_reason == run::kNotConvergedReason);
  std::vector<json> rows;
  std::ifstream in(s.metrics);
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) rows.push_back(json::parse(line));
  std::ifstream r(s.report);
  report.assign(std::istreambuf_iterator<char>(r), {});
  fs::remove_all(c.run.output_dir);
  return {o, rows};
}

}  // namespace

TEST_CASE("sparse and dense refits reach the engine in a run, and report the bytes they moved") {
  const int64_t steps = 5;
  std::string sparse_report, dense_report;
  auto [sparse, sparse_rows] = run_letters("sparse", steps, sparse_report);
  auto [dense, dense_rows] = run_letters("dense", steps, dense_report);
  CHECK(sparse.refits == steps);
  CHECK(dense.refits == steps);
  REQUIRE(sparse_rows.size() == static_cast<size_t>(steps));
  REQUIRE(dense_rows.size() == static_cast<size_t>(steps));
  const uint64_t model_bytes = sparse.bytes / steps;
  CHECK(dense.bytes == sparse.bytes);  // the same exported model each step, whichever way it went
  int64_t since_full = 0;  // refits since the last full one (full_refit_every_steps counts from there)
  for (int64_t i = 0; i < steps; ++i) {
    INFO("step " << i + 1);
    const auto& s = sparse_rows[static_cast<size_t>(i)]["refit"];
    const auto& d = dense_rows[static_cast<size_t>(i)]["refit"];
    CHECK(d["mode"] == "dense");
    CHECK(d["bytes"].get<uint64_t>() == model_bytes);
    CHECK(d["dense_bytes"].get<uint64_t>() == model_bytes);
    CHECK(s["dense_bytes"].get<uint64_t>() == model_bytes);
    // Full at the first refit and every third after the last full one; deltas between, never bigger
    // than a dense refit by more than their headers (a tensor where most elements changed goes
    // dense), unless the rates the sender measured say whole is quicker (the in-process transport
    // hands weights over without copying them, so once both rates are known, whole wins).
    const bool by_rates = s.value("whole_by_rates", false), due = i == 0 || since_full >= 3;
    CHECK(s["mode"] == (due || by_rates ? "full" : "delta"));
    if (due || i == 1) CHECK_FALSE(by_rates);  // i == 1: no delta measured yet, so the delta is sent
    since_full = s["mode"] == "full" ? 1 : since_full + 1;
    const auto bytes = s["bytes"].get<uint64_t>();
    if (s["mode"] == "full") CHECK(bytes > model_bytes);
    else CHECK(bytes < model_bytes + 64 * 1024);
    CHECK(s["changed_elements"].get<int64_t>() <= s["elements"].get<int64_t>());
    WARN("step " << i + 1 << ": sparse refit " << s["mode"] << " moved " << bytes << " bytes of " << model_bytes << " ("
                 << s["changed_elements"] << " of " << s["elements"] << " elements changed)");
  }
  CHECK_THAT(sparse_report, Catch::Contains("refit: ") && Catch::Contains("% of the"));
  CHECK_THAT(dense_report, Catch::Contains("refit: ") && Catch::Contains("100.000% of the"));
}
