// Hang detection and the recorder under many threads: a call past the threshold is reported once,
// with a dump that names it, and calls that return in time are never reported; calls recorded by
// eight threads at once are all counted, each ring keeps its newest calls whole and in order, and
// a dump taken while they run is whole JSON.
#include "core/observe/hang_watch.hpp"

#include <catch2/catch.hpp>
#include <fstream>
#include <future>
#include <map>
#include <nlohmann/json.hpp>
#include <thread>

#include "tests/support/test_util.hpp"

using namespace mlpt;
using nlohmann::json;
namespace fs = std::filesystem;

TEST_CASE("hang watch: a call past the threshold is reported once with a dump naming it", "[observe]") {
  auto& recorder = observe::FlightRecorder::instance();
  mlpt_test::TempDir dir("hang_watch");
  recorder.set_dump_folder(dir.str());
  struct Seen {
    std::string component, call;
    uint64_t request = 0;
    double running_s = 0;
    fs::path dump;
  };
  std::mutex mutex;
  std::vector<Seen> seen;
  // 1 s: far past what a quick call below could be preempted for on a loaded machine.
  observe::HangWatch watch(1.0, [&](const observe::CallRecord& c, double running_s, const fs::path& dump) {
    std::lock_guard lock(mutex);
    seen.push_back({c.component, c.call, c.request_id, running_s, dump});
  });

  // Quick calls while the slow one runs: none of them is a hang.
  const uint32_t slow = recorder.begin("transport", "stuck-transport", "fetch", 42);
  for (int i = 0; i < 200; ++i) recorder.end(recorder.begin("sandbox", "quick-sandbox", "exec", i), false);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  for (;;) {
    {
      std::lock_guard lock(mutex);
      if (!seen.empty()) break;
    }
    REQUIRE(std::chrono::steady_clock::now() < deadline);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // more looks: still one report
  CHECK(watch.check() == 0);
  recorder.end(slow, false);
  std::lock_guard lock(mutex);
  REQUIRE(seen.size() == 1);
  CHECK(seen[0].component == "stuck-transport");
  CHECK(seen[0].call == "fetch");
  CHECK(seen[0].request == 42);
  CHECK(seen[0].running_s >= 1.0);
  REQUIRE(fs::exists(seen[0].dump));
  CHECK(seen[0].dump.filename().string().find("hang") != std::string::npos);
  std::ifstream in(seen[0].dump);
  const json dump = json::parse(in);
  CHECK_THAT(dump["reason"].get<std::string>(),
             Catch::Contains("stuck-transport") && Catch::Contains("fetch"));
  bool named = false;
  for (const auto& c : dump["running"])
    named = named || (c["component"] == "stuck-transport" && c["request_id"] == 42);
  CHECK(named);
  // The call the dump is about, as the watch saw it (it was still running here, so also above).
  REQUIRE(dump["hung_calls"].size() == 1);
  CHECK(dump["hung_calls"][0]["component"] == "stuck-transport");
  CHECK(dump["hung_calls"][0]["request_id"] == 42);
  CHECK(dump["hung_calls"][0]["status"] == "running");
  CHECK(dump["hung_calls"][0]["running_for_s"].get<double>() >= 1.0);
  recorder.set_dump_folder({});
}

TEST_CASE("hang watch: the calls one look finds past the threshold share one dump, each named", "[observe]") {
  auto& recorder = observe::FlightRecorder::instance();
  mlpt_test::TempDir dir("hang_watch_many");
  recorder.set_dump_folder(dir.str());
  std::vector<std::pair<uint64_t, fs::path>> seen;  // request, dump
  const auto report = [&](const observe::CallRecord& c, double, const fs::path& dump) {
    seen.push_back({c.request_id, dump});
  };
  // Its own thread looks only after 1000 s: here the test looks, stepping the clock itself.
  constexpr int64_t kAfterNs = 50'000'000;
  observe::HangWatch watch(kAfterNs * 1e-9, report, 1000);
  const auto start_of = [&](uint64_t request) {
    for (const auto& c : recorder.running())
      if (std::string(c.component) == "stalled-engine" && c.request_id == request) return c.start_ns;
    FAIL("request " << request << " is not running");
    return int64_t{0};
  };
  std::vector<uint32_t> stalled;  // an engine's requests, stalled together
  for (uint64_t request = 1; request <= 3; ++request)
    stalled.push_back(recorder.begin("engine", "stalled-engine", "request (submit to ready)", request));
  const int64_t first = start_of(1), last = start_of(3);
  CHECK(watch.check(first + kAfterNs - 1) == 0);  // none past the threshold yet
  CHECK(watch.check(last + kAfterNs) == 3);
  REQUIRE(seen.size() == 3);
  for (const auto& [request, dump] : seen) CHECK(dump == seen[0].second);
  const json one = json::parse(std::ifstream(seen[0].second));
  REQUIRE(one["hung_calls"].size() == 3);
  for (size_t i = 0; i < 3; ++i) {
    CHECK(one["hung_calls"][i]["request_id"] == seen[i].first);
    CHECK(one["hung_calls"][i]["running_for_s"].get<double>() >= kAfterNs * 1e-9);
  }
  CHECK_THAT(one["reason"].get<std::string>(),
             Catch::Contains("call request (submit to ready) has not returned after"));
  // A later call is found by a later look, in a dump of its own; the others are not told again.
  const uint32_t late = recorder.begin("engine", "stalled-engine", "request (submit to ready)", 4);
  const int64_t late_start = start_of(4);
  CHECK(watch.check(late_start + kAfterNs - 1) == 0);
  CHECK(watch.check(late_start + kAfterNs) == 1);
  REQUIRE(seen.size() == 4);
  CHECK(seen[3].first == 4);
  CHECK(seen[3].second != seen[0].second);
  const json two = json::parse(std::ifstream(seen[3].second));
  REQUIRE(two["hung_calls"].size() == 1);
  CHECK(two["hung_calls"][0]["request_id"] == 4);
  CHECK(two["running"].size() >= 4);  // all four still running
  for (uint32_t token : stalled) recorder.end(token, false);
  recorder.end(late, false);
  CHECK(watch.check(late_start + 100 * kAfterNs) == 0);
  recorder.set_dump_folder({});
}

TEST_CASE("flight recorder: eight threads recording at once lose no call and tear no record", "[observe]") {
  auto& recorder = observe::FlightRecorder::instance();
  mlpt_test::TempDir dir("flight_threads");
  recorder.set_dump_folder(dir.str());
  const uint64_t before = recorder.calls();
  constexpr int kThreads = 8, kCalls = 20000;
  std::atomic<bool> done{false};
  std::vector<fs::path> dumps;
  std::thread dumper([&] {  // dumps taken while the threads record must still be whole JSON
    while (!done.load()) {
      dumps.push_back(recorder.dump("concurrent", "taken while eight threads record"));
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  });
  std::vector<std::thread> pool;
  for (int t = 0; t < kThreads; ++t)
    pool.emplace_back([&, t] {
      const std::string name = "threads-" + std::to_string(t % 2);
      for (int i = 0; i < kCalls; ++i)
        recorder.end(recorder.begin("sandbox", name.c_str(), "exec", static_cast<uint64_t>(t) << 32 | i),
                     i % 7 == 0);
    });
  for (auto& th : pool) th.join();
  done = true;
  dumper.join();

  CHECK(recorder.calls() - before == uint64_t{kThreads} * kCalls);
  std::map<std::string, std::vector<observe::CallRecord>> rings;
  for (const auto& r : recorder.recent())
    if (std::string(r.component).rfind("threads-", 0) == 0) rings[r.component].push_back(r);
  REQUIRE(rings.size() == 2);
  for (const auto& [name, calls] : rings) {
    CHECK(calls.size() == observe::FlightRecorder::kCallsPerComponent);
    for (const auto& c : calls) {  // every field of one call, none mixed with another's
      const uint64_t i = c.request_id & 0xffffffff;
      CHECK(std::string(c.call) == "exec");
      CHECK((c.request_id >> 32) % 2 == (name == "threads-1" ? 1u : 0u));
      CHECK(c.status == (i % 7 == 0 ? observe::CallRecord::kFailed : observe::CallRecord::kOk));
      CHECK(c.duration_ns >= 0);
    }
  }
  for (const auto& c : recorder.running()) CHECK(std::string(c.component).rfind("threads-", 0) != 0);
  REQUIRE_FALSE(dumps.empty());
  for (const auto& path : dumps) {
    REQUIRE(fs::exists(path));
    std::ifstream in(path);
    CHECK_NOTHROW(json::parse(in));
  }
  recorder.set_dump_folder({});
}
