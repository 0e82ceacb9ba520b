// 256 concurrent episodes of the letters task, each a coroutine on an 8-thread RolloutPool, against
// the real reference engine (tiny model) and the real letters harness and reward: every trajectory
// (tokens, logprobs, reward) equals what the blocking path (run_episode, one episode at a time) gives
// with the same seeds, and the process never runs more threads beyond those it had before than the
// pool's 8 and its 8 grading threads (counted in /proc/self/task while the episodes run).
#include <catch2/catch.hpp>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <filesystem>
#include <mutex>
#include <map>
#include <condition_variable>
#include <thread>

#include "core/components/instances.hpp"
#include "core/plugin/plugin.hpp"
#include "core/rollout/rollout_pool.hpp"
#include "core/run/dataset.hpp"
#include "core/text/chat_format.hpp"
#include "core/text/tokenizer.hpp"

namespace fs = std::filesystem;
using namespace mlpt;

namespace {

constexpr int kEpisodes = 256, kThreads = 8;

int threads_now() {
  int n = 0;
  for (auto& e : fs::directory_iterator("/proc/self/task")) n += e.is_directory() ? 1 : 0;
  return n;
}

// Samples the thread count and a gauge every millisecond, keeping the maxima.
class Sampler {
 public:
  explicit Sampler(std::function<int64_t()> gauge) : gauge_(std::move(gauge)) {
    thread_ = std::thread([this] {
      while (!stop_) {
        max_threads_ = std::max(max_threads_.load(), threads_now());
        max_gauge_ = std::max(max_gauge_.load(), gauge_());
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    });
  }
  ~Sampler() { finish(); }
  void finish() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
  int max_threads() const { return max_threads_; }
  int64_t max_gauge() const { return max_gauge_; }

 private:
  std::function<int64_t()> gauge_;
  std::atomic<bool> stop_{false};
  std::atomic<int> max_threads_{0};
  std::atomic<int64_t> max_gauge_{0};
  std::thread thread_;
};

struct Letters {
  std::string cache = MLPT_CACHE_DIR;
  plugin::HostServices host;
  std::shared_ptr<plugin::Plugin> reference, letters;
  std::unique_ptr<components::Harness> harness;
  std::unique_ptr<components::Reward> reward;
  std::shared_ptr<const text::Tokenizer> tokenizer;
  std::unique_ptr<text::ChatFormat> chat;
  run::Dataset data;
  std::atomic<bool> cancelled{false};

  Letters() {
    if (!fs::exists(cache + "/models/tiny/config.json")) FAIL("missing " << cache << "/models/tiny: run scripts/prepare-tiny.sh");
    reference = plugin::Plugin::load(fs::path(MLPT_PLUGIN_DIR) / "libmlpt_reference.so", host);
    letters = plugin::Plugin::load(fs::path(MLPT_PLUGIN_DIR) / "libmlpt_task_letters.so", host);
    harness = std::make_unique<components::Harness>(letters->component(MLPT_COMPONENT_HARNESS, "letters"), nlohmann::json::object());
    reward = std::make_unique<components::Reward>(letters->component(MLPT_COMPONENT_REWARD, "letters"), nlohmann::json::object());
    tokenizer = std::make_shared<const text::Tokenizer>(text::Tokenizer::load(cache + "/tokenizers/tiny-1024/tokenizer.json"));
    chat = text::make_chat_format("qwen3", tokenizer);
    data = run::Dataset::load(fs::path(MLPT_SOURCE_DIR) / "tasks/letters/train.jsonl");
  }
  plugin::Component engine_component() const { return reference->component(MLPT_COMPONENT_ENGINE, "qwen35_cpu"); }
  nlohmann::json engine_settings() const { return {{"checkpoint", cache + "/models/tiny"}}; }

  rollout::EpisodeEnvironment env(components::Engine& engine) {
    return rollout::EpisodeEnvironment{&engine, harness.get(), reward.get(), nullptr, tokenizer.get(), chat.get(),
                                       {*tokenizer->token_to_id("<|im_end|>")}, false, &cancelled};
  }
  // Episode i: its own row and seed; ids differ between the two paths (both run on one engine).
  rollout::EpisodeRequest request(int i, uint64_t id_base) const {
    rollout::EpisodeRequest r;
    r.task = &data.rows[static_cast<size_t>(i) % data.rows.size()];
    r.prompt_index = i;
    r.sampling = mlpt_sampling_params{MLPT_SAMPLING_PARAMS_STRUCT_SIZE, 1.0f, 1.0f, 0, 1000003ull * static_cast<uint64_t>(i) + 17};
    r.id = id_base + static_cast<uint64_t>(i);
    r.limits = rollout::EpisodeLimits{1, 65536, 12, 600};
    return r;
  }
};

Letters& letters() {
  static Letters l;
  return l;
}

// The episodes through a RolloutPool of kThreads threads, all started at once.
struct AsyncRun {
  std::vector<rollout::Trajectory> trajectories{kEpisodes};
  int extra_threads = 0;
  int pool_threads = 0;  // the episodes' and the grading's
  int64_t max_in_flight = 0;
};
AsyncRun run_async(components::Engine& engine, uint64_t id_base, int baseline_extra = 0) {
  auto env = letters().env(engine);
  AsyncRun out;
  std::vector<std::string> errors;
  std::mutex m;
  std::unique_ptr<rollout::RolloutPool> pool;
  Sampler sampler([&] { return pool ? pool->in_flight() : int64_t{0}; });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const int baseline = threads_now() + baseline_extra;  // the sampler included
  pool = std::make_unique<rollout::RolloutPool>(env, kThreads, kEpisodes);
  out.pool_threads = pool->threads() + pool->grading_threads();
  for (int i = 0; i < kEpisodes; ++i)
    pool->start(letters().request(i, id_base), [&, i](rollout::Trajectory&& t, std::exception_ptr e) {
      std::lock_guard l(m);
      if (e) {
        try {
          std::rethrow_exception(e);
        } catch (const std::exception& x) {
          errors.push_back(x.what());
        }
      }
      out.trajectories[static_cast<size_t>(i)] = std::move(t);
    });
  pool->wait_idle();
  sampler.finish();
  out.extra_threads = sampler.max_threads() - baseline;
  out.max_in_flight = sampler.max_gauge();
  pool.reset();
  INFO((errors.empty() ? std::string() : errors.front()));
  REQUIRE(errors.empty());
  return out;
}

std::vector<rollout::Trajectory> run_blocking(components::Engine& engine, uint64_t id_base) {
  auto env = letters().env(engine);
  std::vector<rollout::Trajectory> out;
  for (int i = 0; i < kEpisodes; ++i) out.push_back(rollout::run_episode(env, letters().request(i, id_base)));
  return out;
}

void check_same(const std::vector<rollout::Trajectory>& a, const std::vector<rollout::Trajectory>& b) {
  int generated = 0, rewarded = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    INFO("episode " << i);
    REQUIRE(a[i].tokens == b[i].tokens);
    CHECK(a[i].loss_mask == b[i].loss_mask);
    REQUIRE(a[i].generation_logprobs.size() == b[i].generation_logprobs.size());
    double worst = 0;
    for (size_t j = 0; j < a[i].generation_logprobs.size(); ++j)
      worst = std::max(worst, std::fabs(double(a[i].generation_logprobs[j]) - b[i].generation_logprobs[j]));
    // Batched and lone forwards differ in fp32 summation order only (see the engine's batching test).
    CHECK(worst < 2e-4);
    CHECK(a[i].reward == b[i].reward);
    CHECK(a[i].end == b[i].end);
    generated += static_cast<int>(a[i].generated_tokens());
    rewarded += a[i].reward > 0;
  }
  // The comparison means something: tokens were generated and some episodes earned a reward.
  CHECK(generated >= kEpisodes);
  CHECK(rewarded > 0);
  CHECK(rewarded < kEpisodes);
}

}  // namespace

TEST_CASE("256 concurrent letters episodes on 8 host threads (and 8 grading threads) give what the blocking path gives") {
  components::Engine engine(letters().engine_component(), letters().engine_settings());
  REQUIRE(engine.asynchronous());
  auto blocking = run_blocking(engine, 1);  // also warms the engine (its threads exist from here on)
  auto async = run_async(engine, 100000);
  WARN("async: " << async.extra_threads << " extra host threads for " << kEpisodes << " episodes, up to "
                 << async.max_in_flight << " in flight at once");
  CHECK(async.pool_threads == 2 * kThreads);  // grading threads as many as the episodes' (the default)
  CHECK(async.extra_threads <= async.pool_threads);
  CHECK(async.max_in_flight >= kEpisodes / 4);  // they really ran concurrently
  check_same(async.trajectories, blocking);
}

// The reference engine's own table, cut to its 1.1 size: what a plugin built before 1.2 offers.
static plugin::Component legacy_engine_component() {
  auto component = letters().engine_component();
  static mlpt_engine_api legacy;
  legacy = *component.table<mlpt_engine_api>();
  legacy.struct_size = MLPT_ENGINE_API_STRUCT_SIZE_1_1;
  component.api = &legacy;
  return component;
}

TEST_CASE("an engine of ABI 1.1 (no submit) runs the same episodes through the host's blocking pool") {
  components::Engine old_engine(legacy_engine_component(), letters().engine_settings(), kThreads);
  REQUIRE_FALSE(old_engine.asynchronous());
  components::Engine new_engine(letters().engine_component(), letters().engine_settings());
  auto reference = run_blocking(new_engine, 1);
  auto adapted = run_async(old_engine, 100000);
  // The engine's blocking calls hold kThreads more threads (created with the engine, before the
  // baseline), so the episodes add no more than the pool's own.
  CHECK(adapted.extra_threads <= adapted.pool_threads);
  check_same(adapted.trajectories, reference);
}

// An engine of ABI 1.1 learns a request's id only inside its blocking generate: a cancel that comes
// while the request still waits for a host thread (or before its thread is inside generate) must
// still stop it, not let it run to max_new_tokens.
TEST_CASE("an engine of ABI 1.1: a request cancelled before its generate starts stops at once") {
  components::Engine engine(legacy_engine_component(), letters().engine_settings(), 1);  // one host thread: the second request queues
  REQUIRE_FALSE(engine.asynchronous());
  REQUIRE(engine.capabilities().supports_cancel);
  constexpr int32_t kMaxNew = 20000;
  const std::vector<int32_t> prompt{1, 2, 3};
  std::mutex m;
  std::condition_variable cv;
  std::map<uint64_t, components::Generation> done;
  for (uint64_t id : {1, 2}) {
    components::GenerateRequest r;
    r.request_id = id;
    r.tokens = &prompt;
    r.max_new_tokens = kMaxNew;  // no stop tokens: only a cancel ends it early
    engine.submit(r, [&, id](components::Generation&& g, std::exception_ptr error) {
      REQUIRE_FALSE(error);
      std::lock_guard l(m);
      done[id] = std::move(g);
      cv.notify_all();
    });
  }
  engine.cancel(2);  // queued behind request 1: its generate has not started
  engine.cancel(1);  // just submitted: its thread may not be inside generate yet
  std::unique_lock l(m);
  REQUIRE(cv.wait_for(l, std::chrono::seconds(300), [&] { return done.size() == 2; }));
  for (uint64_t id : {1, 2}) {
    INFO("request " << id << ": " << done[id].tokens.size() << " tokens");
    CHECK(done[id].finish_reason == MLPT_FINISH_CANCELLED);
    CHECK(done[id].tokens.size() < static_cast<size_t>(kMaxNew));
  }
}
