// The flight recorder at the ABI boundary: a call that has not returned stays named however many
// calls come after it, each component keeps its last calls in order, plugin calls marked with
// CallScope are recorded with their status, a hang dump names its call even if it returned meanwhile,
// and a dump written from a signal handler is whole JSON.
#include "core/observe/flight_recorder.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <csignal>
#include <future>
#include <nlohmann/json.hpp>
#include <thread>

#include "core/error.hpp"
#include "core/plugin/call_scope.hpp"
#include "tests/support/test_util.hpp"

using namespace mlpt;
using nlohmann::json;
namespace fs = std::filesystem;

namespace {

json read_json(const fs::path& file) {
  std::ifstream in(file);
  return json::parse(in);
}

const json* ring_of(const json& dump, const std::string& component) {
  for (const auto& ring : dump["recent"])
    if (ring["component"] == component) return &ring;
  return nullptr;
}

}  // namespace

TEST_CASE("flight recorder: a call that did not return is named while thousands of others come and go",
          "[observe]") {
  auto& recorder = observe::FlightRecorder::instance();
  mlpt_test::TempDir dir("flight_hang");
  recorder.set_dump_folder(dir.str());
  std::promise<void> release;
  std::promise<int32_t> started;
  std::thread hung([&] {
    const uint32_t token = recorder.begin("engine", "hung-engine", "fetch_weights", 77);
    started.set_value(static_cast<int32_t>(gettid()));
    release.get_future().wait();
    recorder.end(token, true);
  });
  const int32_t hung_thread = started.get_future().get();
  const int calls = 5000;
  for (int i = 0; i < calls; ++i)
    recorder.end(recorder.begin("sandbox", "busy-sandbox", "exec", static_cast<uint64_t>(i)), false);

  const fs::path path = recorder.dump("test", "a test asked");
  REQUIRE(fs::exists(path));
  const json dump = read_json(path);
  CHECK(dump["reason"] == "a test asked");
  CHECK(dump["pid"] == getpid());
  const auto running = std::find_if(dump["running"].begin(), dump["running"].end(),
                                    [](const json& c) { return c["component"] == "hung-engine"; });
  REQUIRE(running != dump["running"].end());
  CHECK((*running)["call"] == "fetch_weights");
  CHECK((*running)["kind"] == "engine");
  CHECK((*running)["request_id"] == 77);
  CHECK((*running)["thread"] == hung_thread);
  CHECK((*running)["status"] == "running");
  CHECK((*running)["duration_s"].is_null());
  CHECK((*running)["running_for_s"].get<double>() >= 0);

  const json* busy = ring_of(dump, "busy-sandbox");
  REQUIRE(busy);
  const auto& kept = (*busy)["calls"];
  REQUIRE(kept.size() == observe::FlightRecorder::kCallsPerComponent);
  for (size_t i = 0; i < kept.size(); ++i) {  // the last ones, oldest first
    CHECK(kept[i]["request_id"] == calls - static_cast<int>(kept.size()) + static_cast<int>(i));
    CHECK(kept[i]["status"] == "ok");
    CHECK(kept[i]["duration_s"].get<double>() >= 0);
    if (i) CHECK(kept[i]["seq"].get<uint64_t>() > kept[i - 1]["seq"].get<uint64_t>());
  }

  release.set_value();
  hung.join();
  const json after = read_json(recorder.dump("test", "after"));
  const json* engine = ring_of(after, "hung-engine");
  REQUIRE(engine);
  CHECK((*engine)["calls"].back()["status"] == "failed");
  CHECK(std::none_of(after["running"].begin(), after["running"].end(),
                     [](const json& c) { return c["component"] == "hung-engine"; }));
  recorder.set_dump_folder({});
}

TEST_CASE("flight recorder: a hang dump names its call even when the call returns before the dump is written",
          "[observe]") {
  auto& recorder = observe::FlightRecorder::instance();
  mlpt_test::TempDir dir("flight_hung_call");
  recorder.set_dump_folder(dir.str());
  // What a hang watch sees: the call running, at a moment of its own...
  const uint32_t token = recorder.begin("trainer", "slow-trainer", "train_step", 9);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  observe::CallRecord seen;
  for (const auto& call : recorder.running())
    if (std::string(call.component) == "slow-trainer") seen = call;
  REQUIRE(seen.seq != 0);
  const int64_t seen_at = recorder.now_ns();
  // ...then the call returns before the dump is written.
  recorder.end(token, false);
  const json dump = read_json(
      recorder.dump("hang", "slow-trainer's train_step has not returned", std::span(&seen, 1), seen_at));
  REQUIRE(dump["hung_calls"].size() == 1);
  const json& hung = dump["hung_calls"][0];
  CHECK(hung["seq"] == seen.seq);
  CHECK(hung["component"] == "slow-trainer");
  CHECK(hung["call"] == "train_step");
  CHECK(hung["request_id"] == 9);
  CHECK(hung["status"] == "running");  // as it was when judged hung
  CHECK(hung["running_for_s"].get<double>() >= 0.02);
  CHECK(hung["running_for_s"].get<double>() <= static_cast<double>(seen_at - seen.start_ns) * 1e-9 + 1e-9);
  CHECK(std::none_of(dump["running"].begin(), dump["running"].end(),
                     [](const json& c) { return c["component"] == "slow-trainer"; }));
  const json* ring = ring_of(dump, "slow-trainer");  // and its return is in its component's ring
  REQUIRE(ring);
  CHECK((*ring)["calls"].back()["seq"] == seen.seq);
  CHECK((*ring)["calls"].back()["status"] == "ok");
  // A dump about no call in particular has no hung_calls.
  CHECK_FALSE(read_json(recorder.dump("test", "a test asked")).contains("hung_calls"));
  recorder.set_dump_folder({});
}

TEST_CASE("flight recorder: CallScope records each plugin call, its request and whether it failed",
          "[observe]") {
  plugin::Component reward{MLPT_COMPONENT_REWARD, "scope \"reward\"\n", "", nullptr, nullptr, nullptr};
  { plugin::CallScope scope(reward, "grade", 5); }
  try {
    plugin::CallScope scope(reward, "grade", 6);
    throw Error(MLPT_INTERNAL, "the plugin said no");
  } catch (const Error&) {
  }
  std::vector<observe::CallRecord> mine;
  for (const auto& r : observe::FlightRecorder::instance().recent())
    if (std::string(r.component) == reward.name) mine.push_back(r);
  REQUIRE(mine.size() == 2);
  CHECK(std::string(mine[0].kind) == "reward");
  CHECK(std::string(mine[0].call) == "grade");
  CHECK(mine[0].request_id == 5);
  CHECK(mine[0].status == observe::CallRecord::kOk);
  CHECK(mine[1].request_id == 6);
  CHECK(mine[1].status == observe::CallRecord::kFailed);
  CHECK(mine[1].seq > mine[0].seq);

  // Names with quotes and newlines still make valid JSON.
  mlpt_test::TempDir dir("flight_names");
  observe::FlightRecorder::instance().set_dump_folder(dir.str());
  const json dump = read_json(observe::FlightRecorder::instance().dump("test", "names"));
  observe::FlightRecorder::instance().set_dump_folder({});
  const json* ring = ring_of(dump, reward.name);
  REQUIRE(ring);
  CHECK((*ring)["calls"].size() == 2);
}

TEST_CASE("flight recorder: a dump from a signal handler names the running call", "[observe]") {
  auto& recorder = observe::FlightRecorder::instance();
  mlpt_test::TempDir dir("flight_signal");
  recorder.set_dump_folder(dir.str());
  const uint32_t token = recorder.begin("trainer", "signalled-trainer", "train_step", 0);
  const pid_t child = fork();
  if (child == 0) {  // only async-signal-safe work from here: the handler dumps, then the child exits
    struct sigaction action {};
    action.sa_handler = [](int) { observe::FlightRecorder::instance().dump_from_signal("crash-test"); };
    sigemptyset(&action.sa_mask);
    sigaction(SIGUSR2, &action, nullptr);
    raise(SIGUSR2);
    _exit(0);
  }
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  recorder.end(token, false);
  recorder.set_dump_folder({});
  CHECK(WIFEXITED(status));
  std::vector<fs::path> dumps;
  for (const auto& f : fs::directory_iterator(dir.str())) dumps.push_back(f.path());
  REQUIRE(dumps.size() == 1);
  CHECK(dumps[0].filename().string().find("-crash-test.json") != std::string::npos);
  const json dump = read_json(dumps[0]);
  CHECK(dump["reason"] == "crash-test");
  CHECK(dump["pid"] == child);
  CHECK(std::any_of(dump["running"].begin(), dump["running"].end(), [](const json& c) {
    return c["component"] == "signalled-trainer" && c["call"] == "train_step";
  }));
}
