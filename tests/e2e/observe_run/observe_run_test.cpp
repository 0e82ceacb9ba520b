// A whole run of configs/tiny.toml (3 steps, validation after the last) watched as a person would:
// /metrics scraped over HTTP while it runs, `kill -USR1` for a live flight-recorder dump, then the
// timeline, the TensorBoard events and the report checked against what the run recorded itself
// (metrics.jsonl, its summary). An interrupted run leaves a dump that says so.
#include <httplib.h>
#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <csignal>
#include <cstdlib>
#include <thread>

#include "core/run/benchmark_run.hpp"
#include "core/run/run_observer.hpp"
#include "tests/integration/observe/tfevents_reader.hpp"
#include "tests/integration/observe/trace_format.hpp"
#include "tests/support/loopback_port.hpp"

using namespace mlpt;
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

run::RunConfig letters_config(const std::string& tag) {
  const std::string cache = MLPT_CACHE_DIR;
  if (!fs::exists(cache + "/models/tiny/config.json"))
    FAIL("missing " << cache << "/models/tiny: run scripts/prepare-tiny.sh");
  setenv("MLPT_CACHE_DIR", cache.c_str(), 1);
  setenv("MLPT_PLUGIN_PATH", MLPT_PLUGIN_DIR, 1);
  auto c = run::read_run_config(std::string(MLPT_SOURCE_DIR) + "/configs/tiny.toml");
  c.run.output_dir = fs::temp_directory_path() / ("mlpt-observe-" + tag + "-" + std::to_string(::getpid()));
  fs::remove_all(c.run.output_dir);
  c.run.checkpoint_every_steps = 0;
  c.run.metrics_port = free_port();
  c.benchmark.max_steps = 3;
  c.benchmark.first_eval_samples = 3 * c.benchmark.global_batch_size;  // one evaluation, after the last step
  return c;
}

// The value of the sample `name` (no labels) in a /metrics text, or -1.
double sample(const std::string& text, const std::string& name) {
  const std::string key = "\n" + name + " ";
  const auto at = text.find(key);
  return at == std::string::npos ? -1 : std::stod(text.substr(at + key.size()));
}

// Scrapes /metrics until stopped; calls `on_step` once, when the run has done a step.
struct Scraper {
  int port;
  std::function<void()> on_step;
  std::atomic<bool> done{false};
  std::string during;  // the scrape that first saw a step
  std::thread thread{[this] {
    httplib::Client client("127.0.0.1", port);
    client.set_connection_timeout(1);
    while (!done.load()) {
      if (auto r = client.Get("/metrics");
          r && r->status == 200 && sample("\n" + r->body, "mlpt_step") >= 1) {
        during = r->body;
        on_step();
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  }};
  std::string stop() {  // what the scrape that saw a step read (empty: none did)
    done = true;
    if (thread.joinable()) thread.join();
    return during;
  }
  ~Scraper() { stop(); }
};

std::vector<fs::path> files_in(const fs::path& dir, const std::string& part) {
  std::vector<fs::path> out;
  for (const auto& f : fs::directory_iterator(dir))
    if (f.path().filename().string().find(part) != std::string::npos) out.push_back(f.path());
  return out;
}

}  // namespace

TEST_CASE(
    "a run is watched live: /metrics while it runs, a SIGUSR1 dump, a valid timeline and TensorBoard events",
    "[e2e]") {
  auto c = letters_config("live");
  // SIGUSR1 ignored outside the run: a signal that lands after the run restored the handler is harmless.
  auto previous = std::signal(SIGUSR1, SIG_IGN);
  run::RunOptions options;
  options.progress = [](const std::string&) {};
  run::RunSummary s;
  std::string during;
  {
    Scraper scraper{static_cast<int>(c.run.metrics_port), [] { ::kill(::getpid(), SIGUSR1); }};
    s = run::run_benchmark(c, options);
    during = scraper.stop();
  }
  std::signal(SIGUSR1, previous);
  INFO("abort reason: " << s.abort_reason);
  REQUIRE((s.converged || s.abort_reason == run::kNotConvergedReason));
  REQUIRE(s.steps == 3);
  const fs::path out = c.run.output_dir;

  // /metrics during the run: the step it was at, and the run's labels.
  REQUIRE_FALSE(during.empty());
  const double step_seen = sample("\n" + during, "mlpt_step");
  CHECK((step_seen >= 1 && step_seen <= 3));
  CHECK_THAT(during, Catch::Contains("mlpt_run_info{division=\"open\",name=\"tiny\"} 1"));
  CHECK_THAT(during,
             Catch::Contains("mlpt_rollouts_total{kind=\"training\",outcome=\"ok\",worker=\"local\"}"));
  CHECK(sample("\n" + during, "mlpt_samples") ==
        step_seen * static_cast<double>(c.benchmark.global_batch_size));
  // Rollouts in flight per worker: a run in one process has one, "local", with at most
  // rollout_workers episodes.
  const std::string per_worker = "\nmlpt_rollouts_in_flight_per_worker{worker=\"local\"} ";
  const auto at = ("\n" + during).find(per_worker);
  REQUIRE(at != std::string::npos);
  const double in_flight = std::stod(("\n" + during).substr(at + per_worker.size()));
  CHECK((in_flight >= 0 && in_flight <= static_cast<double>(c.run.rollout_workers)));
  CHECK_THAT(during, Catch::Contains("# TYPE mlpt_rollouts_in_flight_per_worker gauge"));

  // The SIGUSR1 dump: the recent calls of the trainer and engine, train_step among them.
  const auto dumps = files_in(run::flight_recorder_dir(out), "SIGUSR1");
  REQUIRE(dumps.size() == 1);
  std::ifstream dump_in(dumps[0]);
  const json dump = json::parse(dump_in);
  CHECK(dump["reason"] == "SIGUSR1: a live dump was asked for");
  bool saw_train_step = false;
  for (const auto& ring : dump["recent"])
    for (const auto& call : ring["calls"])
      saw_train_step |= ring["kind"] == "trainer" && call["call"] == "train_step";
  CHECK(saw_train_step);

  // The timeline: valid, closed, one loop span per step and phase, one ABI span per trainer step and
  // refit, one rollout span per rollout that ended, with its turns' generations inside it.
  const auto trace = trace_format::check(run::trace_file(out));
  INFO((trace.problems.empty() ? "" : trace.problems.front()));
  CHECK(trace.problems.empty());
  CHECK(trace.closed);
  CHECK(trace_format::spans_named(trace, "train step").size() == 3);
  CHECK(trace_format::spans_named(trace, "waiting for rollouts").size() == 3);
  CHECK(trace_format::spans_named(trace, "refit").size() == 3);
  CHECK(trace_format::spans_named(trace, "evaluation").size() == 1);
  CHECK(trace_format::spans_named(trace, "train_step").size() == 3);
  CHECK(trace_format::spans_named(trace, "publish_weights").size() == 3);
  CHECK(trace_format::spans_named(trace, "fetch_weights").size() == 3);
  auto rollouts = trace_format::spans_named(trace, "rollout");
  const auto validation = trace_format::spans_named(trace, "validation rollout");
  rollouts.insert(rollouts.end(), validation.begin(), validation.end());
  CHECK(static_cast<int64_t>(rollouts.size()) == s.rollouts);
  int64_t turns = 0;
  for (const auto& r : rollouts) {
    turns += r["args"]["turns"].get<int64_t>();
    CHECK(r["pid"] == 2);
    CHECK(trace.tracks.count({2, r["tid"].get<int64_t>()}));
  }
  CHECK(static_cast<int64_t>(trace_format::spans_named(trace, "generation").size()) == turns);
  CHECK(static_cast<int64_t>(trace_format::spans_named(trace, "grading").size()) <= s.rollouts);
  // Rollouts in flight, the rollout slots' counter: the one worker, never past rollout_workers.
  int in_flight_samples = 0;
  for (const auto& e : trace.events)
    if (e["ph"] == "C" && e["name"] == "rollouts in flight") {
      ++in_flight_samples;
      REQUIRE(e["args"].contains("local"));
      CHECK((e["args"]["local"] >= 0 && e["args"]["local"] <= c.run.rollout_workers));
    }
  CHECK(in_flight_samples > 0);

  // TensorBoard: every metrics row's values, and each evaluation's.
  const auto events_files = files_in(run::tensorboard_dir(out), "events.out.tfevents.");
  REQUIRE(events_files.size() == 1);
  const auto events = tfevents_spec::read(events_files[0]);
  std::map<std::pair<int64_t, std::string>, float> scalars;
  for (const auto& e : events)
    for (const auto& [tag, value] : e.scalars) scalars[{e.step, tag}] = value;
  std::ifstream metrics(s.metrics);
  int rows = 0, evaluated = 0;
  for (std::string line; std::getline(metrics, line); ++rows) {
    const json row = json::parse(line);
    const int64_t step = row["step"];
    INFO("step " << step);
    CHECK(scalars.at({step, "train/reward_mean"}) == static_cast<float>(row["reward_mean"].get<double>()));
    CHECK(scalars.at({step, "train/samples"}) == static_cast<float>(row["samples"].get<int64_t>()));
    for (const auto& [name, value] : row["trainer"].items())
      CHECK(scalars.at({step, "trainer/" + name}) == static_cast<float>(value.get<double>()));
    if (row.contains("eval")) {
      ++evaluated;
      CHECK(scalars.at({step, "eval/pass_at_k"}) ==
            static_cast<float>(row["eval"]["pass_at_k"].get<double>()));
      CHECK(scalars.at({step, "eval/pass_at_1"}) ==
            static_cast<float>(row["eval"]["pass_at_1"].get<double>()));
    }
  }
  CHECK(rows == 3);
  CHECK(evaluated == 1);

  // The report links both.
  std::ifstream report_in(s.report);
  const std::string report((std::istreambuf_iterator<char>(report_in)), {});
  CHECK_THAT(report, Catch::Contains("href='trace.json'") && Catch::Contains("href='tensorboard/'"));
  fs::remove_all(out);
}

TEST_CASE("an interrupted run dumps the flight recorder, naming why", "[e2e]") {
  auto c = letters_config("interrupted");
  std::atomic<bool> interrupted{false};
  run::RunOptions options;
  options.progress = [](const std::string&) {};
  options.interrupted = &interrupted;
  run::RunSummary s;
  {
    Scraper scraper{static_cast<int>(c.run.metrics_port), [&] { interrupted = true; }};
    s = run::run_benchmark(c, options);
  }
  CHECK(s.abort_reason == "interrupted");
  const auto dumps = files_in(run::flight_recorder_dir(c.run.output_dir), "aborted");
  REQUIRE(dumps.size() == 1);
  std::ifstream in(dumps[0]);
  const json dump = json::parse(in);
  CHECK(dump["reason"] == "interrupted");
  CHECK(dump["recent"].size() >= 3);  // trainer, engine, transport, harness, reward
  CHECK(trace_format::check(run::trace_file(c.run.output_dir)).problems.empty());
  fs::remove_all(c.run.output_dir);
}
