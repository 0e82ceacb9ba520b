// The asynchronous engine (ABI 1.2) against the blocking path of ABI 1.1, in the same run, on the
// real reference engine (tiny model) and the letters task:
//   1. host threads and wall time for 256 concurrent episodes: one host thread per episode calling
//      the blocking path (run_episode), against coroutines on an 8-thread RolloutPool;
//   2. heap per generate call at 65536 context with routed experts recorded: the 1.1 call, whose
//      caller pre-allocates outputs for max_new_tokens (the room left in the context), against a
//      1.2 request whose result is as long as what was asked and generated.
// Needs ${MLPT_CACHE_DIR} prepared by scripts/prepare-tiny.sh. Usage: bench_engine_async [episodes]
#include <malloc.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <new>
#include <thread>

#include "bench_cache.hpp"  // bench/support
#include "core/components/instances.hpp"
#include "core/plugin/plugin.hpp"
#include "core/rollout/rollout_pool.hpp"
#include "core/run/dataset.hpp"
#include "core/text/chat_format.hpp"
#include "core/text/tokenizer.hpp"

// ---- a heap counter: live and peak bytes from operator new, in this process and its plugins ----
namespace {
std::atomic<int64_t> g_live{0}, g_peak{0};
void* counted(size_t n) {
  void* p = std::malloc(n ? n : 1);
  if (!p) throw std::bad_alloc();
  int64_t live = g_live += static_cast<int64_t>(malloc_usable_size(p));
  for (int64_t peak = g_peak.load(); live > peak && !g_peak.compare_exchange_weak(peak, live);) {
  }
  return p;
}
void uncounted(void* p) {
  if (!p) return;
  g_live -= static_cast<int64_t>(malloc_usable_size(p));
  std::free(p);
}
}  // namespace
void* operator new(size_t n) { return counted(n); }
void* operator new[](size_t n) { return counted(n); }
void operator delete(void* p) noexcept { uncounted(p); }
void operator delete[](void* p) noexcept { uncounted(p); }
void operator delete(void* p, size_t) noexcept { uncounted(p); }
void operator delete[](void* p, size_t) noexcept { uncounted(p); }

namespace fs = std::filesystem;
using namespace mlpt;
using Clock = std::chrono::steady_clock;

namespace {

int threads_now() {
  int n = 0;
  for (auto& e : fs::directory_iterator("/proc/self/task")) n += e.is_directory() ? 1 : 0;
  return n;
}

// Runs `body` while a sampler keeps the largest thread count; returns {extra threads, seconds}.
template <class Body>
std::pair<int, double> measure_threads(Body&& body) {
  std::atomic<bool> stop{false};
  std::atomic<int> peak{0};
  std::thread sampler([&] {
    while (!stop) {
      peak = std::max(peak.load(), threads_now());
      std::this_thread::sleep_for(std::chrono::microseconds(500));
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const int baseline = threads_now();
  auto t0 = Clock::now();
  body();
  double s = std::chrono::duration<double>(Clock::now() - t0).count();
  stop = true;
  sampler.join();
  return {peak.load() - baseline, s};
}

}  // namespace

int main(int argc, char** argv) try {
  const int episodes = argc > 1 ? std::atoi(argv[1]) : 256;
  const int pool_threads = 8;
  const std::string cache = mlpt::bench::cache_dir().string();
  if (!fs::exists(cache + "/models/tiny/config.json")) {
    std::fprintf(stderr, "bench_engine_async: missing %s/models/tiny: run scripts/prepare-tiny.sh\n", cache.c_str());
    return 2;
  }
  plugin::HostServices host;
  auto reference = plugin::Plugin::load(fs::path(MLPT_PLUGIN_DIR) / "libmlpt_reference.so", host);
  auto letters = plugin::Plugin::load(fs::path(MLPT_PLUGIN_DIR) / "libmlpt_task_letters.so", host);
  const nlohmann::json engine_settings = {{"checkpoint", cache + "/models/tiny"}};
  components::Engine engine(reference->component(MLPT_COMPONENT_ENGINE, "qwen35_cpu"), engine_settings);
  components::Harness harness(letters->component(MLPT_COMPONENT_HARNESS, "letters"), nlohmann::json::object());
  components::Reward reward(letters->component(MLPT_COMPONENT_REWARD, "letters"), nlohmann::json::object());
  auto tokenizer = std::make_shared<const text::Tokenizer>(text::Tokenizer::load(cache + "/tokenizers/tiny-1024/tokenizer.json"));
  auto chat = text::make_chat_format("qwen3", tokenizer);
  auto data = run::Dataset::load(fs::path(MLPT_SOURCE_DIR) / "tasks/letters/train.jsonl");
  std::atomic<bool> cancelled{false};
  rollout::EpisodeEnvironment env{&engine, &harness, &reward, nullptr, tokenizer.get(), chat.get(),
                                  {*tokenizer->token_to_id("<|im_end|>")}, false, &cancelled};
  uint64_t next_id = 1;
  auto request = [&](int i) {
    rollout::EpisodeRequest r;
    r.task = &data.rows[static_cast<size_t>(i) % data.rows.size()];
    r.prompt_index = i;
    r.sampling = mlpt_sampling_params{MLPT_SAMPLING_PARAMS_STRUCT_SIZE, 1.0f, 1.0f, 0, static_cast<uint64_t>(i) + 1};
    r.id = next_id++;
    r.limits = rollout::EpisodeLimits{1, 65536, 12, 600};
    return r;
  };
  rollout::run_episode(env, request(0));  // warm: the engine's threads exist from here on

  // ---- 1. host threads per concurrent episodes ----
  auto blocking = measure_threads([&] {
    std::vector<std::thread> threads;
    for (int i = 0; i < episodes; ++i) threads.emplace_back([&, r = request(i)] { rollout::run_episode(env, r); });
    for (auto& t : threads) t.join();
  });
  auto async = measure_threads([&] {
    rollout::RolloutPool pool(env, pool_threads, episodes);
    for (int i = 0; i < episodes; ++i) pool.start(request(i), [](rollout::Trajectory&&, std::exception_ptr) {});
    pool.wait_idle();
  });
  std::printf("%d concurrent letters episodes (tiny model, 12 new tokens each)\n", episodes);
  std::printf("%-48s %14s %10s\n", "path", "host threads", "wall s");
  std::printf("%-48s %14d %10.2f\n", "blocking: a thread per episode (baseline)", blocking.first, blocking.second);
  std::printf("%-48s %14d %10.2f\n", "async: coroutines on a RolloutPool", async.first, async.second);
  std::printf("%-48s %13.3fx %9.2fx\n", "ratio async / blocking", double(async.first) / blocking.first,
              async.second / blocking.second);

  // ---- 2. heap per generate call at 65536 context, routed experts recorded ----
  auto component = reference->component(MLPT_COMPONENT_ENGINE, "qwen35_cpu");
  static mlpt_engine_api legacy;  // the same engine, seen through its 1.1 table (blocking generate)
  legacy = *component.table<mlpt_engine_api>();
  legacy.struct_size = MLPT_ENGINE_API_STRUCT_SIZE_1_1;
  component.api = &legacy;
  components::Engine old_engine(component, engine_settings, 1);
  const auto info = engine.model_info();
  const int64_t context = 65536, prompt_len = 1024;
  std::vector<int32_t> prompt(static_cast<size_t>(prompt_len));
  for (int64_t i = 0; i < prompt_len; ++i) prompt[static_cast<size_t>(i)] = static_cast<int32_t>((i * 37 + 11) % 1000);
  components::GenerateRequest g;
  g.tokens = &prompt;
  g.max_new_tokens = static_cast<int32_t>(context - prompt_len);  // the room left, as an episode asks
  // A reply that ends after its first token (every id stops), so max_new_tokens is pure capacity.
  for (int32_t t = 0; t < info.vocab_size; ++t) g.stop_tokens.push_back(t);
  g.record_routed_experts = true;
  auto per_call = [&](components::Engine& e) {
    int64_t best = INT64_MAX;
    for (int rep = 0; rep < 3; ++rep) {
      g.request_id = next_id++;
      const int64_t before = g_live.load();
      g_peak = before;
      auto out = e.generate(g);
      best = std::min(best, g_peak.load() - before);
    }
    return best;
  };
  const int64_t old_bytes = per_call(old_engine), new_bytes = per_call(engine);
  const double per_position = double(info.num_moe_layers * info.experts_per_token) * 2;
  std::printf("\nheap per generate call: %lld-token prompt, max_new_tokens %d (context %lld), a 1-token reply,\n"
              "routed experts recorded (%lld MoE layers x top-%lld); peak heap growth during the call\n",
              static_cast<long long>(prompt_len), g.max_new_tokens, static_cast<long long>(context),
              static_cast<long long>(info.num_moe_layers), static_cast<long long>(info.experts_per_token));
  std::printf("%-48s %14s\n", "path", "bytes");
  std::printf("%-48s %14lld\n", "1.1 generate, caller buffers (baseline)", static_cast<long long>(old_bytes));
  std::printf("%-48s %14lld\n", "1.2 submit, engine-owned result", static_cast<long long>(new_bytes));
  std::printf("%-48s %13.3fx\n", "ratio 1.2 / 1.1", double(new_bytes) / old_bytes);
  // The routed-experts output alone, at the real model's size (60 MoE layers, top-10).
  const double real = 60.0 * 10 * 2;
  std::printf("routed-experts output per call: 1.1 %.1f MB (here) / %.1f MB (397B); 1.2 %.3f MB / %.3f MB\n",
              double(context) * per_position / 1e6, double(context) * real / 1e6, double(prompt_len + 1) * per_position / 1e6,
              double(prompt_len + 1) * real / 1e6);
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench_engine_async: %s\n", e.what());
  return 1;
}
