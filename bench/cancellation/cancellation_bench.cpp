// How long a stop takes to reach the plugins' long calls through host services is_cancelled: a
// sandbox command (`sleep 60`) and a reference-trainer step, each stopped mid-call. The latency is
// given as a ratio to a baseline measured in the same run: for the sandbox, one exec of `true`; for
// the train step, the same step run to completion (the wait a stop would cost without polling).
//   bench_cancellation [repetitions, default 5] [sequences per step, default 16]
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include <unistd.h>

#include "core/error.hpp"
#include "core/plugin/plugin.hpp"
#include "mlpt/sandbox.h"
#include "mlpt/trainer.h"
#include "sif_image.hpp"

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

double secs(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Runs `call` on a thread, sets `stop` after `after_s`, and returns the seconds from the stop to the
// call's return (the call must still be running when the stop is set).
template <class Call>
double stop_latency(std::atomic<bool>& stop, double after_s, Call call) {
  stop = false;
  auto running = std::async(std::launch::async, call);
  std::this_thread::sleep_for(std::chrono::duration<double>(after_s));
  if (running.wait_for(std::chrono::seconds(0)) == std::future_status::ready)
    throw std::runtime_error("the call finished before the stop: make it longer");
  auto t = Clock::now();
  stop = true;
  running.wait();
  double latency = secs(t, Clock::now());
  stop = false;
  return latency;
}

double sandbox(int reps, const fs::path& dir) {
  fs::create_directories(dir / "root/testbed");
  fs::create_directories(dir / "root/.mlpt");
  std::ofstream(dir / "root/.mlpt/binds.json") << R"({"binds": ["/usr", "/bin", "/sbin", "/lib", {"host": "/lib64", "optional": true}]})";
  std::string image = (dir / "bench.sif").string();
  mlpt::sif::build_sif(dir / "root", image);
  std::atomic<bool> stop{false};
  mlpt::plugin::HostServices host(&stop);
  auto plugin = mlpt::plugin::Plugin::load(std::string(MLPT_PLUGIN_DIR) + "/libmlpt_sandbox_apptainer.so", host);
  auto comp = plugin->component(MLPT_COMPONENT_SANDBOX, "apptainer");
  const auto* api = comp.table<mlpt_sandbox_api>();
  std::string cfg = R"({"runtime": "bwrap"})";
  mlpt_sandbox_runtime_create_args rc{MLPT_SANDBOX_RUNTIME_CREATE_ARGS_STRUCT_SIZE, {cfg.data(), cfg.size()}, nullptr, {}};
  mlpt::plugin::check(comp, api->runtime_create(&rc), "runtime_create");
  mlpt_sandbox_create_args ca{MLPT_SANDBOX_CREATE_ARGS_STRUCT_SIZE, rc.runtime, {image.data(), image.size()}, 0, 0, nullptr};
  mlpt::plugin::check(comp, api->create(&ca), "create");
  auto exec = [&](const std::string& cmd) {
    mlpt_sandbox_exec_args a{};
    a.struct_size = MLPT_SANDBOX_EXEC_ARGS_STRUCT_SIZE;
    a.sandbox = ca.sandbox;
    a.command = {cmd.data(), cmd.size()};
    a.timeout_ms = 120000;
    mlpt_error* e = api->exec(&a);
    try {
      mlpt::plugin::check(comp, e, "call");
    } catch (const mlpt::Error&) {  // cancelled: expected
    }
  };
  std::vector<double> base, stopped;
  for (int i = 0; i < reps; ++i) {
    auto t = Clock::now();
    exec("true");
    base.push_back(secs(t, Clock::now()));
    stopped.push_back(stop_latency(stop, 0.3, [&] { exec("sleep 60"); }));
  }
  api->destroy(ca.sandbox);
  api->runtime_destroy(rc.runtime);
  std::printf("%-34s %10.2f ms  (baseline exec `true` %.2f ms, ratio %.2f)\n", "sandbox `sleep 60` stopped after",
              median(stopped) * 1e3, median(base) * 1e3, median(stopped) / median(base));
  return median(stopped);
}

// A Qwen3.5-shaped model small enough to initialise in seconds, large enough that a layer is not free.
void write_model_config(const fs::path& file) {
  std::ofstream(file) << R"({"model_type": "qwen3_5_moe", "text_config": {"model_type": "qwen3_5_moe_text",
    "vocab_size": 512, "hidden_size": 128, "num_hidden_layers": 8, "num_attention_heads": 4, "num_key_value_heads": 2,
    "head_dim": 32, "linear_num_key_heads": 2, "linear_num_value_heads": 4, "linear_key_head_dim": 32,
    "linear_value_head_dim": 32, "linear_conv_kernel_dim": 4, "num_experts": 8, "num_experts_per_tok": 2,
    "moe_intermediate_size": 64, "shared_expert_intermediate_size": 64, "norm_topk_prob": true, "rms_norm_eps": 1e-6,
    "max_position_embeddings": 8192, "full_attention_interval": 4,
    "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5},
    "initializer_range": 0.02, "dtype": "float32"}})";
}

void train_step(int reps, int sequences, const fs::path& dir) {
  write_model_config(dir / "model.json");
  const std::string ck = (dir / "ck").string();
  const std::string init = std::string(MLPT_BUILD_DIR) + "/bin/mlpt-model init --config " + (dir / "model.json").string() +
                           " --seed 1 --out " + ck + " > /dev/null 2>&1";
  if (std::system(init.c_str()) != 0) throw std::runtime_error("mlpt-model init failed: " + init);
  std::atomic<bool> stop{false};
  mlpt::plugin::HostServices host(&stop);
  auto plugin = mlpt::plugin::Plugin::load(std::string(MLPT_PLUGIN_DIR) + "/libmlpt_reference.so", host);
  auto comp = plugin->component(MLPT_COMPONENT_TRAINER, "qwen35_cpu");
  const auto* api = comp.table<mlpt_trainer_api>();
  const std::string settings = R"({"checkpoint": ")" + ck + R"(", "micro_batch_tokens": 4096})";
  mlpt_trainer_create_args ca{MLPT_TRAINER_CREATE_ARGS_STRUCT_SIZE, {settings.data(), settings.size()}, nullptr};
  mlpt::plugin::check(comp, api->create(&ca), "trainer create");

  const int64_t len = 2048, prompt = 64;
  std::vector<int64_t> offsets{0};
  std::vector<int32_t> tokens;
  std::vector<uint8_t> mask, truncated(sequences, 0);
  std::vector<float> gen, adv;
  for (int s = 0; s < sequences; ++s) {
    for (int64_t i = 0; i < len; ++i) {
      tokens.push_back(static_cast<int32_t>((s * 13 + 7 * i) % 512));
      mask.push_back(i >= prompt);
      gen.push_back(i >= prompt ? -6.2f : 0.0f);
    }
    offsets.push_back(static_cast<int64_t>(tokens.size()));
    adv.push_back(s % 2 ? 1.0f : -1.0f);
  }
  mlpt_train_batch b{};
  b.struct_size = MLPT_TRAIN_BATCH_STRUCT_SIZE;
  b.num_sequences = static_cast<size_t>(sequences);
  b.offsets = offsets.data(), b.tokens = tokens.data(), b.loss_mask = mask.data();
  b.generation_logprobs = gen.data(), b.advantages = adv.data(), b.truncated = truncated.data();
  auto step = [&] {
    mlpt_train_step_args a{MLPT_TRAIN_STEP_ARGS_STRUCT_SIZE, ca.trainer, &b};
    mlpt_error* e = api->train_step(&a);
    try {
      mlpt::plugin::check(comp, e, "call");
    } catch (const mlpt::Error&) {  // cancelled: expected
    }
  };
  auto t = Clock::now();
  step();
  const double full = secs(t, Clock::now());
  std::vector<double> stopped;
  for (int i = 0; i < reps; ++i) stopped.push_back(stop_latency(stop, full * (0.2 + 0.6 * i / std::max(1, reps - 1)), step));
  api->destroy(ca.trainer);
  std::printf("%-34s %10.2f ms  (baseline: the step to completion %.0f ms, %d x %lld tokens; ratio %.4f)\n",
              "train step stopped after", median(stopped) * 1e3, full * 1e3, sequences, static_cast<long long>(len),
              median(stopped) / full);
}

}  // namespace

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::atoi(argv[1]) : 5;
  const int sequences = argc > 2 ? std::atoi(argv[2]) : 16;
  const fs::path dir = fs::temp_directory_path() / ("mlpt-cancel-bench-" + std::to_string(getpid()));
  fs::create_directories(dir);
  try {
    std::printf("median latency from the host's stop flag to the call's return, %d repetitions\n", reps);
    sandbox(reps, dir / "sandbox");
    train_step(reps, sequences, dir);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_cancellation: %s\n", e.what());
    fs::remove_all(dir);
    return 1;
  }
  fs::remove_all(dir);
  return 0;
}
