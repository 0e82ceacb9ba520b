// What recording a plugin call costs: CallScope's begin and end in the flight recorder, on one
// thread and on 8 threads at once, in nanoseconds of CPU time per call (the process's CPU time over
// the calls made: with more threads than cores, wall time per thread would count the waits for a core). Then
// the same against plugin time: the calls of a dump a run wrote (`bench_flight_recorder DUMP.json`, e.g. a
// run's flight_recorder/dump-N-SIGUSR1.json) say how long its plugin calls took; the recorder's
// cost is that many calls times the cost per call, as a share of their time (goal < 0.1%).
#include <cstdio>
#include <ctime>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "core/observe/flight_recorder.hpp"

namespace {

double cpu_ns() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) * 1e9 + static_cast<double>(t.tv_nsec);
}

double ns_per_call(int threads, long calls_per_thread) {
  auto& recorder = mlpt::observe::FlightRecorder::instance();
  const double t0 = cpu_ns();
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      for (long i = 0; i < calls_per_thread; ++i)
        recorder.end(
            recorder.begin("sandbox", t % 2 ? "bench-a" : "bench-b", "exec", static_cast<uint64_t>(i)),
            false);
    });
  for (auto& th : pool) th.join();
  return (cpu_ns() - t0) / (static_cast<double>(calls_per_thread) * threads);
}

}  // namespace

int main(int argc, char** argv) {
  double one = 1e9, eight = 1e9;
  for (int rep = 0; rep < 3; ++rep) {
    one = std::min(one, ns_per_call(1, 1'000'000));
    eight = std::min(eight, ns_per_call(8, 200'000));
  }
  std::printf(
      "flight recorder: %.0f ns of CPU per call on one thread, %.0f ns with 8 threads calling at once\n", one,
      eight);
  if (argc < 2) return 0;
  std::ifstream in(argv[1]);
  const auto dump = nlohmann::json::parse(in);
  double plugin_s = 0;
  long calls = 0;
  for (const auto& ring : dump["recent"])
    for (const auto& call : ring["calls"])
      if (call["duration_s"].is_number() && std::string(call["call"]).find("request (") == std::string::npos)
        plugin_s += call["duration_s"].get<double>(), ++calls;
  if (calls == 0) return 0;
  std::printf(
      "%s: %ld plugin calls, %.6f s of plugin time (%.1f us per call); recording them costs %.4f%% of it "
      "(one thread) to %.4f%% (8 threads)\n",
      argv[1], calls, plugin_s, plugin_s / static_cast<double>(calls) * 1e6,
      one * 1e-9 * static_cast<double>(calls) / plugin_s * 100,
      eight * 1e-9 * static_cast<double>(calls) / plugin_s * 100);
  return 0;
}
