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
  observe::HangWatch watch(0.2, [&](const observe::CallRecord& c, double running_s, const fs::path& dump) {
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
  CHECK(seen[0].running_s >= 0.2);
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
