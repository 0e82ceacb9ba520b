// The timeline writer: what it writes validates against the Trace Event Format (trace_format.hpp),
// is readable before it is closed, stays under its cap saying so, and takes spans from many
// threads at once; other processes' parts merge into it on its clock.
#include <catch2/catch.hpp>
#include <chrono>
#include <fstream>
#include <thread>

#include "core/error.hpp"
#include "core/observe/trace_merge.hpp"
#include "core/observe/trace_writer.hpp"
#include "tests/integration/observe/trace_format.hpp"
#include "tests/support/test_util.hpp"

using namespace mlpt;
namespace fs = std::filesystem;

TEST_CASE("trace: tracks and spans validate against the trace event format, readable before the end",
          "[observe]") {
  mlpt_test::TempDir dir("trace");
  const fs::path file = dir / "trace.json";
  observe::TraceWriter trace(file, "a run", 1 << 20);
  trace.name_group(1, "rank 0", 0);
  trace.name_track(1, 1, "loop", 0);
  trace.name_group(2, "rollout slots", 1);
  trace.name_track(2, 1, "slot 0", 0);
  trace.span(1, 1, "train step", "loop", 1.5, 0.25, {{"step", 1}});
  trace.span(2, 1, "rollout", "rollout", 0.5, 1.0);
  trace.span(2, 1, "generation", "rollout", 0.5, 0.25, {{"turn", 1}});
  trace.span(2, 1, "tool execution", "rollout", 0.75, 0.5);
  trace.counter(2, "rollouts in flight", 1.0, {{"rollouts", 3}});

  auto open = trace_format::check(file);  // the writer is still open: no closing bracket yet
  CHECK(open.problems.empty());
  CHECK_FALSE(open.closed);
  CHECK(trace_format::spans_named(open, "generation").size() == 1);

  trace.close();
  auto c = trace_format::check(file);
  INFO((c.problems.empty() ? "" : c.problems.front()));
  CHECK(c.problems.empty());
  CHECK(c.closed);
  CHECK(c.groups.at(0) == "a run");
  CHECK(c.groups.at(1) == "rank 0");
  CHECK(c.tracks.at({2, 1}) == "slot 0");
  const auto step = trace_format::spans_named(c, "train step");
  REQUIRE(step.size() == 1);
  CHECK(step[0]["ts"].get<double>() == Approx(1.5e6));  // microseconds
  CHECK(step[0]["dur"].get<double>() == Approx(0.25e6));
  CHECK(step[0]["args"]["step"] == 1);
  CHECK(c.events.front()["ph"] == "M");
  CHECK(c.events[1]["args"]["max_bytes"] == (1 << 20));  // the cap, said at the start
  CHECK(c.events.back()["name"] == "trace end");
  CHECK(c.events.back()["args"]["dropped_events"] == 0);
}

TEST_CASE("trace: a span that overlaps the one it starts in is what the check catches", "[observe]") {
  mlpt_test::TempDir dir("trace_overlap");
  const fs::path file = dir / "trace.json";
  {
    observe::TraceWriter trace(file, "overlap", 1 << 20);
    trace.span(2, 1, "rollout", "rollout", 0.0, 1.0);
    trace.span(2, 1, "grading", "rollout", 0.9, 0.2);  // ends after its parent
  }
  CHECK(trace_format::check(file).problems.size() == 1);
}

TEST_CASE("trace: past the cap events are dropped, the file stays under it and says how many", "[observe]") {
  mlpt_test::TempDir dir("trace_cap");
  const fs::path file = dir / "trace.json";
  const uint64_t cap = 16 * 1024;
  const int spans = 2000;
  {
    observe::TraceWriter trace(file, "capped", cap);
    for (int i = 0; i < spans; ++i) trace.span(1, 1, "span " + std::to_string(i), "test", i * 1e-3, 1e-4);
    CHECK(trace.dropped() > 0);
  }
  CHECK(fs::file_size(file) <= cap);
  auto c = trace_format::check(file);
  CHECK(c.problems.empty());
  const auto kept =
      std::count_if(c.events.begin(), c.events.end(), [](const auto& e) { return e["ph"] == "X"; });
  CHECK(kept > 0);
  CHECK(kept < spans);
  CHECK(std::any_of(c.events.begin(), c.events.end(),
                    [](const auto& e) { return e["name"] == "trace cap reached: later events dropped"; }));
  CHECK(c.events.back()["args"]["dropped_events"] == spans - kept);
  CHECK(c.events[1]["args"]["max_bytes"] == cap);
}

TEST_CASE("trace: spans from many threads at once are all written, each whole", "[observe]") {
  mlpt_test::TempDir dir("trace_threads");
  const fs::path file = dir / "trace.json";
  const int threads = 8, per_thread = 500;
  {
    observe::TraceWriter trace(file, "threads", 64 << 20);
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t)
      pool.emplace_back([&, t] {
        for (int i = 0; i < per_thread; ++i) trace.span(1, t + 1, "work", "test", i * 1e-3, 5e-4, {{"i", i}});
      });
    for (auto& th : pool) th.join();
  }
  auto c = trace_format::check(file);
  CHECK(c.problems.empty());
  CHECK(trace_format::spans_named(c, "work").size() == static_cast<size_t>(threads * per_thread));
}

TEST_CASE("trace: a file that exists is never overwritten", "[observe]") {
  mlpt_test::TempDir dir("trace_exists");
  const fs::path file = dir / "trace.json";
  std::ofstream(file) << "kept";
  CHECK_THROWS_AS(observe::TraceWriter(file, "again", 1 << 20), Error);
  std::ifstream in(file);
  std::string text;
  in >> text;
  CHECK(text == "kept");
}

TEST_CASE("trace: other processes' parts merge onto the trace's clock, each in its group, the result valid",
          "[observe]") {
  mlpt_test::TempDir dir("trace_merge");
  const fs::path main_file = dir / "trace.json", part_file = dir / "rank-1.json",
                 open_file = dir / "rank-2.json";
  observe::TraceWriter main_trace(main_file, "the run", 1 << 20);
  main_trace.name_group(1, "rank 0", 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(30));  // the parts start later, as a rank's does
  observe::TraceWriter part(part_file, "a rank", 1 << 20), still_open(open_file, "another rank", 1 << 20);
  part.name_group(101, "rank 1", 2);
  part.name_track(101, 10, "trainer x", 10);
  still_open.name_group(102, "rank 2", 3);
  // One instant, seen by both: its span must land at the same time in the merged trace.
  const auto instant = observe::TraceWriter::Clock::now();
  main_trace.span(1, 1, "on the coordinator", "loop", main_trace.seconds(instant), 0.01);
  part.span(101, 10, "on the rank", "abi", part.seconds(instant), 0.01);
  still_open.span(102, 10, "fetch", "abi", still_open.seconds(instant), 0.002);
  main_trace.close();
  part.close();
  // still_open's writer is running: its file has no closing bracket, and a line being written is cut.
  std::ofstream(open_file, std::ios::app) << ",\n{\"name\":\"cut sh";

  const auto merged = observe::merge_trace_parts(main_file, {part_file, open_file});
  CHECK(merged.parts == 2);
  CHECK(merged.skipped_lines == 1);
  CHECK(merged.unaligned.empty());
  const auto c = trace_format::check(main_file);
  INFO((c.problems.empty() ? "" : c.problems.front()));
  CHECK(c.problems.empty());
  CHECK(c.closed);
  CHECK(c.groups.at(0) == "the run");  // the parts' titles do not rename the trace
  CHECK(c.groups.at(101) == "rank 1");
  CHECK(c.groups.at(102) == "rank 2");
  CHECK(c.tracks.at({101, 10}) == "trainer x");
  const auto coordinator = trace_format::spans_named(c, "on the coordinator");
  const auto rank = trace_format::spans_named(c, "on the rank");
  REQUIRE(coordinator.size() == 1);
  REQUIRE(rank.size() == 1);
  CHECK(rank[0]["pid"] == 101);
  // The part began ~30 ms later: unshifted, its span would sit ~30000 us early. Both files read the
  // steady and the wall clock within microseconds of each other at their start.
  CHECK(rank[0]["ts"].get<double>() == Approx(coordinator[0]["ts"].get<double>()).margin(200));
  CHECK(trace_format::spans_named(c, "fetch").at(0)["ts"].get<double>() ==
        Approx(coordinator[0]["ts"].get<double>()).margin(200));
  // The parts' cap notes and end markers stay, on their own group and scoped to it.
  int part_markers = 0;
  for (const auto& e : c.events)
    if (e.value("name", "") == "trace end" && e["pid"] == 101) part_markers += e["s"] == "p";
  CHECK(part_markers == 1);
}

TEST_CASE("trace: a trace without a clock origin is refused for merging, naming the file", "[observe]") {
  mlpt_test::TempDir dir("trace_merge_bad");
  const fs::path file = dir / "trace.json";
  std::ofstream(file) << "[\n{\"name\":\"x\",\"ph\":\"i\",\"ts\":0,\"pid\":0,\"tid\":0}\n]\n";
  CHECK_THROWS_WITH(observe::merge_trace_parts(file, {}),
                    Catch::Contains(file.string()) && Catch::Contains("clock_origin_unix_ns"));
}
