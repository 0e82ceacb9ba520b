// Every rank of a distributed run keeps its own flight recorder and writes it into the run
// folder's flight_recorder/rank-N/: on SIGUSR1 (what mpirun passes on to every rank when a person
// signals it) and when one of its plugin calls runs past [run] hang_dump_after_s, naming the call.
// Every rank's plugin calls are also on the run's timeline (trace.json), a group of tracks per rank
// on the coordinator's clock.
#include <algorithm>
#include <catch2/catch.hpp>
#include <csignal>
#include <nlohmann/json.hpp>
#include <set>

#include "distributed_support.hpp"
#include "tests/integration/observe/trace_format.hpp"

namespace fs = std::filesystem;
using namespace dist_run_test;
using nlohmann::json;

namespace {

// The dumps in `folder` whose file name holds `why`, parsed.
std::vector<json> dumps(const fs::path& folder, const std::string& why) {
  std::vector<json> out;
  if (!fs::exists(folder)) return out;
  for (const auto& entry : fs::directory_iterator(folder))
    if (entry.path().filename().string().find(why) != std::string::npos)
      out.push_back(json::parse(read(entry.path())));
  return out;
}

constexpr double kHangAfterS = 0.02;

bool holds_call(const json& dump, const std::string& kind) {
  for (const auto& ring : dump["recent"])
    if (ring["kind"] == kind && !ring["calls"].empty()) return true;
  return false;
}

}  // namespace

TEST_CASE(
    "each rank of mpirun -np 4 mlpt run dumps its own plugin calls into flight_recorder/rank-N on SIGUSR1 "
    "and on a hung call") {
  require_tiny_model();
  mlpt_test::TempDir dir("rank_dumps");
  const fs::path out = fs::path(dir.str()) / "run";
  const fs::path config = fs::path(dir.str()) / "rank-dumps.toml";
  // A threshold every train step passes (each takes 0.1 s or more here), and on the rollout workers
  // every episode step: the letters harness is told to take 50 ms a step, so each worker has calls
  // past it by design, however fast the machine. One prompt a step keeps the dumps few.
  write_tiny_config(config, out,
                    {{"checkpoint_every_steps = ", "checkpoint_every_steps = 1\nhang_dump_after_s = " +
                                                       std::to_string(kHangAfterS)},
                     {"num_prompts_per_step = ", "num_prompts_per_step = 1"},
                     {"[components.reward]",
                      "[components.harness.settings]\nstep_delay_ms = 50\n\n[components.reward]"},
                     {"max_steps = ", "max_steps = 30"},
                     {"first_eval_samples = ", "first_eval_samples = 64000"}});
  const fs::path step_2 = out / "checkpoints" / "step_2" / "loop_state.json";
  const SignalledRun run = run_signalling_rank(launch("rank-dumps", 600, false) + config.string() + " 2>&1",
                                               "rank-dumps", 1, SIGUSR1, [&] { return fs::exists(step_2); });
  INFO(run.output);
  REQUIRE(run.signalled > 0);
  CHECK((WEXITSTATUS(run.status) == 0 || WEXITSTATUS(run.status) == 1));  // a dump stops nothing

  const std::vector<json> live = dumps(out / "flight_recorder" / "rank-1", "SIGUSR1");
  REQUIRE(live.size() == 1);
  CHECK(live[0]["rank"] == 1);
  CHECK(live[0]["pid"] == run.signalled);
  CHECK(holds_call(live[0], "trainer"));
  CHECK_THAT(run.output,
             Catch::Contains("trainer rank 0 (rank 1): SIGUSR1: the last calls into its plugins are in " +
                             (out / "flight_recorder" / "rank-1").string()));

  // Hung calls, named on stderr and dumped, on the trainer rank and on each rollout worker.
  for (int rank : {1, 2, 3}) {
    const std::vector<json> hung = dumps(out / "flight_recorder" / ("rank-" + std::to_string(rank)), "hang");
    INFO("rank " << rank);
    REQUIRE_FALSE(hung.empty());
    CHECK(hung[0]["rank"] == rank);
    bool stalled_step = false;  // the harness's slow episode step, on a rollout worker
    for (const json& dump : hung) {
      const std::string reason = dump["reason"];
      CHECK_THAT(reason, Catch::Contains("has not returned after"));
      // The calls it is about, as they were when judged hung: a call here passes the threshold by
      // little, so it may have returned by the time the dump was written ("running" may be empty).
      REQUIRE_FALSE(dump["hung_calls"].empty());
      for (const json& call : dump["hung_calls"]) {
        CHECK(call["rank"] == rank);
        CHECK(call["status"] == "running");
        CHECK(call["running_for_s"].get<double>() >= kHangAfterS);
        CHECK_THAT(reason, Catch::Contains(call["component"].get<std::string>() + "' call " +
                                           call["call"].get<std::string>()));
        stalled_step |= call["kind"] == "harness" && call["call"] == "episode_step";
      }
    }
    if (rank > 1) CHECK(stalled_step);
  }
  CHECK_THAT(run.output, Catch::Contains("(rank 1): trainer 'qwen35_cpu' call") &&
                             Catch::Contains("has not returned after"));
  // The coordinator's own dumps stay in flight_recorder/ itself, each saying rank 0.
  for (const json& own : dumps(out / "flight_recorder", "dump-")) CHECK(own["rank"] == 0);
}

namespace {

// The spans named `name` in group `pid`, by start.
std::vector<json> spans_in(const trace_format::Checked& trace, int64_t pid, const std::string& name) {
  std::vector<json> out;
  for (const auto& span : trace_format::spans_named(trace, name))
    if (span["pid"] == pid) out.push_back(span);
  std::sort(out.begin(), out.end(), [](const json& a, const json& b) { return a["ts"] < b["ts"]; });
  return out;
}

}  // namespace

TEST_CASE(
    "under mpirun -np 4 trace.json has a group of tracks per rank with its plugin calls, on the "
    "coordinator's clock") {
  require_tiny_model();
  mlpt_test::TempDir dir("rank_timeline");
  const fs::path out = fs::path(dir.str()) / "run";
  const fs::path config = fs::path(dir.str()) / "rank-timeline.toml";
  constexpr int kSteps = 3;
  write_tiny_config(config, out,
                    {{"checkpoint_every_steps = ", "checkpoint_every_steps = 0"},
                     {"max_steps = ", "max_steps = " + std::to_string(kSteps)},
                     {"first_eval_samples = ", "first_eval_samples = 64000"}});
  int status = 0;
  const std::string output =
      mlpt_test::run_command(launch("rank-timeline", 600, false) + config.string() + " 2>&1", &status);
  INFO(output);
  REQUIRE((WEXITSTATUS(status) == 0 || WEXITSTATUS(status) == 1));  // converged or not within 3 steps

  const auto trace = trace_format::check(out / "trace.json");
  INFO((trace.problems.empty() ? "" : trace.problems.front()));
  CHECK(trace.problems.empty());
  CHECK(trace.closed);
  CHECK_FALSE(fs::exists(out / "trace_parts"));  // merged, then removed
  // Rank 1 is the trainer group, ranks 2 and 3 the rollout workers (tiny-distributed.toml).
  const std::map<int64_t, std::string> ranks = {{101, "trainer rank 0 (rank 1)"},
                                                {102, "rollout worker 0 (rank 2)"},
                                                {103, "rollout worker 1 (rank 3)"}};
  for (const auto& [pid, name] : ranks) {
    INFO("group " << pid);
    REQUIRE(trace.groups.count(pid));
    CHECK(trace.groups.at(pid) == name);
    bool has_track = false;
    for (const auto& [track, track_name] : trace.tracks)
      has_track |= track.first == pid && !track_name.empty();
    CHECK(has_track);
  }
  // The trainer rank's steps and publishes, each rollout worker's fetch of every version.
  const auto rank_steps = spans_in(trace, 101, "train_step");
  CHECK(rank_steps.size() == kSteps);
  CHECK(spans_in(trace, 101, "publish_weights").size() == kSteps);
  for (int64_t worker : {102, 103}) CHECK(spans_in(trace, worker, "fetch_weights").size() == kSteps);
  // Each rollout worker's rollouts, with their turns' generation, on slots of its own.
  std::map<std::string, int> rollouts_of;
  for (const auto& r : trace_format::spans_named(trace, "rollout")) {
    const std::string worker = r["args"]["worker"];
    REQUIRE(trace.tracks.count({2, r["tid"].get<int64_t>()}));
    CHECK_THAT(trace.tracks.at({2, r["tid"].get<int64_t>()}), Catch::StartsWith(worker + " slot "));
    ++rollouts_of[worker];
  }
  CHECK(rollouts_of.size() == 2);
  for (const auto& [worker, count] : rollouts_of) CHECK(count > 0);
  CHECK(trace_format::spans_named(trace, "generation").size() >=
        trace_format::spans_named(trace, "rollout").size());
  // Rollouts in flight on each rollout worker, the rollout slots' counter: both workers, each within
  // its rollout_workers (8 in tiny-distributed.toml).
  int samples = 0;
  std::set<std::string> workers;
  for (const auto& e : trace.events)
    if (e["ph"] == "C" && e["name"] == "rollouts in flight") {
      ++samples;
      CHECK(e["pid"] == 2);
      for (const auto& [worker, in_flight] : e["args"].items()) {
        workers.insert(worker);
        CHECK((in_flight >= 0 && in_flight <= 8));
      }
    }
  CHECK(samples > 0);
  CHECK(workers == std::set<std::string>{"rollout worker 0 (rank 2)", "rollout worker 1 (rank 3)"});
  // One clock: each of the trainer rank's train_step calls lies inside the coordinator's "train
  // step" that waited for it. On one node the only error of the alignment is the instant between
  // reading the steady and the wall clock at each file's start (microseconds): 1 ms is ample.
  const auto loop_steps = spans_in(trace, 1, "train step");
  REQUIRE(loop_steps.size() == kSteps);
  REQUIRE(rank_steps.size() == kSteps);
  constexpr double kToleranceUs = 1000;
  for (size_t i = 0; i < loop_steps.size(); ++i) {
    const double loop_start = loop_steps[i]["ts"], loop_end = loop_start + loop_steps[i]["dur"].get<double>();
    const double start = rank_steps[i]["ts"], end = start + rank_steps[i]["dur"].get<double>();
    INFO("step " << i + 1 << ": the coordinator's [" << loop_start << ", " << loop_end << "] us, the rank's ["
                 << start << ", " << end << "] us");
    CHECK(start >= loop_start - kToleranceUs);
    CHECK(end <= loop_end + kToleranceUs);
  }
}
