// One cancellation source reaches the plugins' long calls: a host whose stop flag is set (as the
// signal handler of `mlpt run` sets it) makes a sleeping sandbox command and a running train step
// return MLPT_CANCELLED within 2 s (a generous bound; bench/cancellation measures the real figure),
// and a cancelled train step leaves the weights as they were.
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <future>
#include <string>
#include <thread>

#include "core/error.hpp"
#include "core/plugin/plugin.hpp"
#include "harness.hpp"
#include "mlpt/sandbox.h"
#include "test_image.hpp"

namespace {

using Clock = std::chrono::steady_clock;
using mlpt::plugin::HostServices;
using mlpt::plugin::Plugin;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// The error code of a call, MLPT_OK when it succeeds.
mlpt_error_code code_of(const mlpt::plugin::Component& c, mlpt_error* e, std::string* message = nullptr) {
  try {
    mlpt::plugin::check(c, e, "call");
  } catch (const mlpt::Error& err) {
    if (message) *message = err.what();
    return err.code();
  }
  return MLPT_OK;
}

// Starts `call` on another thread, raises the stop flag once the call is under way (after
// `settle`), and says how long it took to return after that, with its error code and message.
struct Stopped {
  double latency_s;
  mlpt_error_code code;
  std::string message;
};

Stopped stop_while_running(std::atomic<bool>& stop, const mlpt::plugin::Component& c, const std::function<mlpt_error*()>& call,
                           std::chrono::milliseconds settle) {
  auto running = std::async(std::launch::async, call);
  std::this_thread::sleep_for(settle);
  REQUIRE(running.wait_for(std::chrono::seconds(0)) == std::future_status::timeout);  // it is really running
  auto signalled = Clock::now();
  stop = true;
  REQUIRE(running.wait_for(std::chrono::seconds(2)) == std::future_status::ready);
  Stopped s{seconds_since(signalled), MLPT_OK, {}};
  s.code = code_of(c, running.get(), &s.message);
  return s;
}

}  // namespace

TEST_CASE("the host's stop flag kills a sleeping sandbox command within 2 s") {
  std::atomic<bool> stop{false};
  HostServices host(&stop);
  auto plugin = Plugin::load(std::string(MLPT_PLUGIN_DIR) + "/libmlpt_sandbox_apptainer.so", host);
  auto comp = plugin->component(MLPT_COMPONENT_SANDBOX, "apptainer");
  const auto* api = comp.table<mlpt_sandbox_api>();
  const std::string state = "/dev/shm/mlpt-cancel-state-" + std::to_string(::getpid());
  sandbox_test::RemoveAtExit cleanup{state};
  std::string cfg = R"({"runtime": "bwrap", "state_dir": ")" + state + "\"}";
  mlpt_sandbox_runtime_create_args rc{MLPT_SANDBOX_RUNTIME_CREATE_ARGS_STRUCT_SIZE, {cfg.data(), cfg.size()}, nullptr, {}};
  mlpt::plugin::check(comp, api->runtime_create(&rc), "runtime_create");
  const std::string image = sandbox_test::test_image();
  mlpt_sandbox_create_args ca{MLPT_SANDBOX_CREATE_ARGS_STRUCT_SIZE, rc.runtime, {image.data(), image.size()}, 0, 0, nullptr};
  mlpt::plugin::check(comp, api->create(&ca), "create");

  const std::string cmd = "sleep 60";
  mlpt_sandbox_exec_args a{};
  a.struct_size = MLPT_SANDBOX_EXEC_ARGS_STRUCT_SIZE;
  a.sandbox = ca.sandbox;
  a.command = {cmd.data(), cmd.size()};
  a.timeout_ms = 120000;
  const Stopped s = stop_while_running(stop, comp, [&] { return api->exec(&a); }, std::chrono::milliseconds(500));
  CHECK(s.code == MLPT_CANCELLED);
  CHECK_THAT(s.message, Catch::Contains("killed"));
  WARN("sandbox exec stopped " << s.latency_s * 1e3 << " ms after the stop flag");
  CHECK(s.latency_s < 2.0);

  stop = false;  // the sandbox is still usable for the next command
  const std::string echo = "echo alive";
  a.command = {echo.data(), echo.size()};
  CHECK(code_of(comp, api->exec(&a)) == MLPT_OK);
  api->destroy(ca.sandbox);
  api->runtime_destroy(rc.runtime);
}

namespace {

// A train-step batch of `sequences` sequences of 1024 tokens of the micro model (vocab 37).
reftest::Batch long_batch(int sequences) {
  reftest::Batch b;
  for (int s = 0; s < sequences; ++s) {
    std::vector<int32_t> seq(1024);
    for (size_t i = 0; i < seq.size(); ++i) seq[i] = static_cast<int32_t>((s * 5 + 7 * i) % 37);
    b.add(seq, 24, s % 2 ? 1.0f : -1.0f, std::vector<float>(1000, -3.6f));
  }
  return b;
}

}  // namespace

TEST_CASE("the host's stop flag stops a running train step within 2 s and leaves the weights unchanged") {
  std::atomic<bool> stop{false};
  HostServices host(&stop);
  auto plugin = Plugin::load(std::string(MLPT_PLUGIN_DIR) + "/libmlpt_reference.so", host);
  auto comp = plugin->component(MLPT_COMPONENT_TRAINER, "qwen35_cpu");
  const auto* api = comp.table<mlpt_trainer_api>();
  mlpt_test::TempDir dir("cancel_step");
  std::string settings = reftest::settings(reftest::make_checkpoint(dir, "ck", 5), R"("threads": 1)");
  mlpt_trainer_create_args ca{MLPT_TRAINER_CREATE_ARGS_STRUCT_SIZE, {settings.data(), settings.size()}, nullptr};
  mlpt::plugin::check(comp, api->create(&ca), "trainer create");
  mlpt_trainer* trainer = ca.trainer;
  auto logprobs = [&](reftest::Batch& b) {
    std::vector<float> out(b.tokens.size());
    mlpt_compute_logprobs_args a{MLPT_COMPUTE_LOGPROBS_ARGS_STRUCT_SIZE, trainer, b.get(), out.data()};
    mlpt::plugin::check(comp, api->compute_logprobs(&a), "compute_logprobs");
    return out;
  };

  // Size the step so that, uncancelled, it would take about 8 s on this machine.
  reftest::Batch one = long_batch(1);
  auto timed = Clock::now();
  mlpt_train_step_args warm{MLPT_TRAIN_STEP_ARGS_STRUCT_SIZE, trainer, one.get()};
  mlpt::plugin::check(comp, api->train_step(&warm), "train_step");
  const double per_sequence = std::max(seconds_since(timed), 1e-4);
  const int sequences = static_cast<int>(std::clamp(8.0 / per_sequence, 8.0, 4096.0));
  reftest::Batch big = long_batch(sequences);
  reftest::Batch probe = long_batch(2);
  const std::vector<float> before = logprobs(probe);

  mlpt_train_step_args a{MLPT_TRAIN_STEP_ARGS_STRUCT_SIZE, trainer, big.get()};
  auto started = Clock::now();
  const Stopped s = stop_while_running(stop, comp, [&] { return api->train_step(&a); }, std::chrono::milliseconds(300));
  CHECK(s.code == MLPT_CANCELLED);
  INFO(s.message);
  WARN("train step of " << sequences << " x 1024 tokens (~" << per_sequence * sequences << " s) stopped "
                        << s.latency_s * 1e3 << " ms after the stop flag, " << seconds_since(started) << " s in");
  CHECK(s.latency_s < 2.0);

  stop = false;
  CHECK(logprobs(probe) == before);  // no half-applied update
  api->destroy(trainer);
}
