// The qwen35_cpu engine through the C ABI: sampling contract, continuous batching, sessions,
// cancel, pause/resume, weight loading, R3 recording, and agreement with the trainer.
#include <atomic>
#include <chrono>
#include <cmath>
#include <future>
#include <map>
#include <mutex>
#include <thread>

#include "harness.hpp"

using namespace reftest;
using mlpt_test::TempDir;

namespace {
const std::vector<int32_t> kPrompt{3, 14, 15, 9, 2, 6, 5, 35, 8, 9, 7, 9, 3, 2, 3, 8, 4, 6, 2, 6, 4};

double max_diff(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, static_cast<double>(std::fabs(a[i] - b[i])));
  return m;
}

// Larger initial weights: peaked distributions, so logprob comparisons are not trivially flat.
nlohmann::json sharp_config() {
  nlohmann::json c = mlpt_test::micro_config_json();
  c["text_config"]["initializer_range"] = 0.4;
  return c;
}

double spread(const std::vector<float>& v) {
  auto [lo, hi] = std::minmax_element(v.begin(), v.end());
  return *hi - *lo;
}

std::vector<int32_t> concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}
}  // namespace

TEST_CASE("the plugin provides engine and trainer qwen35_cpu with their capabilities") {
  auto& l = loaded();
  CHECK(l.plugin->name() == "mlpt-reference");
  auto* ec = l.engine.caps<mlpt_engine_capabilities>();
  CHECK(ec->returns_logprobs == 1);
  CHECK(ec->returns_routed_experts == 1);
  CHECK(ec->keeps_sessions == 1);
  auto* tc = l.trainer.caps<mlpt_trainer_capabilities>();
  CHECK(tc->supports_routing_replay == 1);
  CHECK(tc->supports_state_save == 1);
  CHECK(tc->device_type == kDLCPU);
}

TEST_CASE("generation: lengths, seeds, stop tokens, finish reasons, model info") {
  TempDir dir("eng_basic");
  Engine e(settings(make_checkpoint(dir, "ck", 5)));
  mlpt_engine_model_info info{MLPT_ENGINE_MODEL_INFO_STRUCT_SIZE};
  mlpt::plugin::check(loaded().engine, loaded().e()->model_info(e.get(), &info), "model_info");
  CHECK(info.vocab_size == 37);
  CHECK(info.num_moe_layers == 4);
  CHECK(info.experts_per_token == 2);
  CHECK(info.weight_version == 0);

  GenerateOptions o;
  o.max_new = 12;
  Generation a = generate(e, kPrompt, o);
  CHECK(a.tokens.size() == 12);
  CHECK(a.reason == MLPT_FINISH_LENGTH);
  for (float lp : a.logprobs) CHECK(lp <= 0.0f);
  Generation b = generate(e, kPrompt, o);
  CHECK(b.tokens == a.tokens);  // same seed, same tokens
  CHECK(b.logprobs == a.logprobs);
  o.seed = 2;
  CHECK(generate(e, kPrompt, o).tokens != a.tokens);

  // Stop on the 4th sampled token: it is returned last, with reason STOP.
  o.seed = 1;
  o.stop = {a.tokens[3]};
  Generation s = generate(e, kPrompt, o);
  size_t first = std::find(a.tokens.begin(), a.tokens.end(), a.tokens[3]) - a.tokens.begin();
  CHECK(s.tokens.size() == first + 1);
  CHECK(s.reason == MLPT_FINISH_STOP);
  CHECK(std::equal(s.tokens.begin(), s.tokens.end(), a.tokens.begin()));

  // Greedy-like sampling (temperature 0.05, top-k 1) picks the argmax with logprob 0.
  o.stop.clear();
  o.top_k = 1;
  Generation g = generate(e, kPrompt, o);
  for (float lp : g.logprobs) CHECK(lp == 0.0f);
  o.top_k = 0;
  o.top_p = 1e-6f;  // nucleus of one token: the same argmax
  CHECK(generate(e, kPrompt, o).tokens == g.tokens);
}

TEST_CASE("engine logprobs of a sampled sequence equal the trainer's compute_logprobs (temperature 1)") {
  TempDir dir("eng_vs_trainer");
  std::string ck = make_checkpoint(dir, "ck", 6, sharp_config());
  Engine e(settings(ck));
  Trainer t(settings(ck));
  GenerateOptions o;
  o.max_new = 30;
  Generation g = generate(e, kPrompt, o);
  Batch b;
  b.add(concat(kPrompt, g.tokens), kPrompt.size(), 0.0f);
  std::vector<float> lp = compute_logprobs(t, b);
  std::vector<float> tail(lp.begin() + kPrompt.size(), lp.end());
  double d = max_diff(tail, g.logprobs);
  INFO("max |engine - trainer| logprob = " << d << ", logprob spread " << spread(g.logprobs));
  CHECK(spread(g.logprobs) > 1.0);
  CHECK(d < 1e-4);
  CHECK(lp[0] == 0.0f);
}

TEST_CASE("continuous batching: many concurrent requests give what each gives alone") {
  TempDir dir("eng_batch");
  Engine e(settings(make_checkpoint(dir, "ck", 7, sharp_config()), R"("max_step_tokens": 24)"));  // prefill spans steps
  const int n = 6;
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < n; ++i) prompts.push_back(std::vector<int32_t>(kPrompt.begin(), kPrompt.begin() + 5 + 3 * i));
  std::vector<Generation> alone;
  for (int i = 0; i < n; ++i) {
    GenerateOptions o;
    o.seed = 100 + i;
    o.max_new = 10 + i;
    alone.push_back(generate(e, prompts[i], o));
  }
  std::vector<std::future<Generation>> futures;
  for (int i = 0; i < n; ++i)
    futures.push_back(std::async(std::launch::async, [&, i] {
      GenerateOptions o;
      o.request_id = 1000 + i;
      o.seed = 100 + i;
      o.max_new = 10 + i;
      return generate(e, prompts[i], o);
    }));
  for (int i = 0; i < n; ++i) {
    Generation g = futures[i].get();
    CHECK(g.tokens == alone[i].tokens);
    // A batch of other rows changes the GEMM blocking, so fp32 sums come in another order: logits
    // of size ~10 (sharp weights) then differ by a few ulp each, up to ~4e-5 seen in the logprob.
    CHECK(max_diff(g.logprobs, alone[i].logprobs) < 2e-4);
  }
}

TEST_CASE("a session's next turn prefills only the suffix and equals a fresh request") {
  TempDir dir("eng_session");
  Engine e(settings(make_checkpoint(dir, "ck", 8, sharp_config())));
  GenerateOptions o;
  o.session_id = 77;
  o.max_new = 9;
  Generation turn1 = generate(e, kPrompt, o);
  std::vector<int32_t> next = concat(concat(kPrompt, turn1.tokens), {4, 5, 6});  // tool output appended
  o.max_new = 11;
  o.seed = 3;
  Generation turn2 = generate(e, next, o);
  GenerateOptions fresh = o;
  fresh.session_id = 0;
  Generation ref = generate(e, next, fresh);
  CHECK(turn2.tokens == ref.tokens);
  CHECK(max_diff(turn2.logprobs, ref.logprobs) < 1e-5);
  // Tokens that do not extend the session re-prefill and are still right.
  std::vector<int32_t> other = kPrompt;
  other[2] = 30;
  Generation diverged = generate(e, other, o);
  fresh.session_id = 0;
  CHECK(diverged.tokens == generate(e, other, fresh).tokens);
  // A released (or never seen) session is fine too.
  mlpt_session_release_args rel{MLPT_SESSION_RELEASE_ARGS_STRUCT_SIZE, e.get(), 77};
  mlpt::plugin::check(loaded().engine, loaded().e()->session_release(&rel), "session_release");
  rel.session_id = 12345;
  mlpt::plugin::check(loaded().engine, loaded().e()->session_release(&rel), "session_release");
}

namespace {
// The engine's host metrics, as a run's metrics rows get them.
struct MetricLog {
  std::mutex mutex;
  std::map<std::string, double> last;
  MetricLog() {
    loaded().host.set_metric_sink([this](const std::string& name, double value) {
      std::lock_guard lk(mutex);
      last[name] = value;
    });
  }
  ~MetricLog() { loaded().host.set_metric_sink(nullptr); }
  double operator[](const std::string& name) {
    std::lock_guard lk(mutex);
    REQUIRE(last.count(name));
    return last[name];
  }
};

void load(const Engine& e, const mlpt_export_weights_args& ex, uint64_t version) {
  mlpt::plugin::check(loaded().engine, loaded().e()->pause(e.get()), "pause");
  mlpt_load_weights_args lw{MLPT_LOAD_WEIGHTS_ARGS_STRUCT_SIZE, e.get(), version, ex.out_tensors, ex.out_num_tensors};
  mlpt::plugin::check(loaded().engine, loaded().e()->load_weights(&lw), "load_weights");
  mlpt::plugin::check(loaded().engine, loaded().e()->resume(e.get()), "resume");
}
}  // namespace

TEST_CASE("a group's shared prompt is prefilled once, and after a refit a request equals a cold engine bit for bit") {
  TempDir dir("eng_prefix");
  std::string ck_a = make_checkpoint(dir, "a", 21, sharp_config()), ck_b = make_checkpoint(dir, "b", 22, sharp_config());
  MetricLog metrics;
  const std::string steps = R"("max_step_tokens": 16)";  // the prompt prefills over several steps
  Engine e(settings(ck_a, steps));
  std::vector<int32_t> prompt;
  for (int i = 0; i < 3; ++i) prompt.insert(prompt.end(), kPrompt.begin(), kPrompt.end());  // 63 tokens
  const double n = static_cast<double>(prompt.size());

  // Four members of a group at once, as the host submits them: the prompt is computed once.
  std::vector<std::future<Generation>> group;
  for (int i = 0; i < 4; ++i)
    group.push_back(std::async(std::launch::async, [&, i] {
      GenerateOptions o;
      o.request_id = 500 + i;
      o.seed = 60 + i;
      o.max_new = 6;
      o.record = true;
      return generate(e, prompt, o, 8);
    }));
  std::vector<Generation> members;
  for (auto& f : group) members.push_back(f.get());
  Trainer tb(settings(ck_b));
  mlpt_export_weights_args ex{MLPT_EXPORT_WEIGHTS_ARGS_STRUCT_SIZE, tb.get()};
  mlpt::plugin::check(loaded().trainer, loaded().t()->export_weights(&ex), "export_weights");
  load(e, ex, 2);
  // Under version 0: the leader prefilled n - 1 tokens and every member its last prompt token.
  CHECK(metrics["engine/prefill_tokens"] == (n - 1) + 4);
  CHECK(metrics["engine/prefix_tokens_saved"] == 3 * (n - 1));
  // Each member equals the same request on a cold engine: tokens, and logprobs up to the rounding
  // of a batch (the members decode together through GEMM, a lone request through GEMV: other
  // summation orders, amplified by the sharp weights' logits of ~10).
  Engine cold_a(settings(ck_a, steps));
  for (int i = 0; i < 4; ++i) {
    GenerateOptions o;
    o.seed = 60 + i;
    o.max_new = 6;
    o.record = true;
    Generation ref = generate(cold_a, prompt, o, 8);
    CHECK(members[i].tokens == ref.tokens);
    CHECK(members[i].routed == ref.routed);  // the prompt's routing comes with the cached prefix
    CHECK(max_diff(members[i].logprobs, ref.logprobs) < 1e-3);
  }

  // After the refit the cached prompt is gone: the same prompt gives exactly a cold engine's
  // logprobs under the new weights (a stale prefix would give weights-a keys and states).
  GenerateOptions o;
  o.seed = 9;
  o.max_new = 12;
  Generation after = generate(e, prompt, o);
  Generation again = generate(e, prompt, o);  // the new version's own prefix, cached now
  Engine cold_b(settings(ck_a, steps));
  load(cold_b, ex, 2);
  Generation ref = generate(cold_b, prompt, o);
  CHECK(after.version == 2);
  CHECK(after.tokens == ref.tokens);
  CHECK(after.logprobs == ref.logprobs);
  CHECK(again.logprobs == ref.logprobs);
  load(e, ex, 3);
  CHECK(metrics["engine/prefix_tokens_saved"] == n - 1);  // `again` only: nothing from version 0
  // Sessions and the prefix cache together: a member's next turn continues its session.
  GenerateOptions s = o;
  s.session_id = 31;
  Generation t1 = generate(e, prompt, s);
  std::vector<int32_t> next = concat(concat(prompt, t1.tokens), {4, 5});
  Generation t2 = generate(e, next, s);
  s.session_id = 0;
  Generation t2_fresh = generate(e, next, s);
  CHECK(t2.tokens == t2_fresh.tokens);
  CHECK(max_diff(t2.logprobs, t2_fresh.logprobs) < 1e-5);
}

TEST_CASE("prefix_cache_bytes 0 turns the prefix cache off and changes no result") {
  TempDir dir("eng_noprefix");
  std::string ck = make_checkpoint(dir, "ck", 23, sharp_config());
  Engine on(settings(ck)), off(settings(ck, R"("prefix_cache_bytes": 0)"));
  GenerateOptions o;
  o.max_new = 10;
  Generation a = generate(on, kPrompt, o), b = generate(on, kPrompt, o), c = generate(off, kPrompt, o);
  CHECK(a.tokens == c.tokens);
  CHECK(b.tokens == c.tokens);
  CHECK(max_diff(a.logprobs, c.logprobs) < 1e-5);
  CHECK(a.logprobs == b.logprobs);  // the hit follows the same computation as the leader
}

TEST_CASE("a tiny session memory budget evicts and the result stays correct") {
  TempDir dir("eng_evict");
  Engine e(settings(make_checkpoint(dir, "ck", 9), R"("session_memory_bytes": 1)"));
  GenerateOptions o;
  o.session_id = 5;
  Generation t1 = generate(e, kPrompt, o);
  std::vector<int32_t> next = concat(kPrompt, t1.tokens);
  Generation t2 = generate(e, next, o);
  o.session_id = 0;
  CHECK(t2.tokens == generate(e, next, o).tokens);
}

TEST_CASE("cancel stops a running request promptly with the tokens so far") {
  TempDir dir("eng_cancel");
  nlohmann::json cfg = mlpt_test::micro_config_json();
  cfg["text_config"]["max_position_embeddings"] = 1 << 20;
  Engine e(settings(make_checkpoint(dir, "ck", 10, cfg)));
  auto f = std::async(std::launch::async, [&] {
    GenerateOptions o;
    o.request_id = 42;
    o.max_new = 200000;
    return generate(e, kPrompt, o);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  mlpt_cancel_args c{MLPT_CANCEL_ARGS_STRUCT_SIZE, e.get(), 42};
  auto t0 = std::chrono::steady_clock::now();
  // The engine knows the id once the thread is inside generate (under load, maybe after the first
  // cancel, which is then a no-op): cancel until it ends.
  do mlpt::plugin::check(loaded().engine, loaded().e()->cancel(&c), "cancel");
  while (f.wait_for(std::chrono::milliseconds(100)) != std::future_status::ready &&
         std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10));
  REQUIRE(f.wait_for(std::chrono::seconds(0)) == std::future_status::ready);
  Generation g = f.get();
  CHECK(g.reason == MLPT_FINISH_CANCELLED);
  CHECK(g.tokens.size() < 200000);
  CHECK(std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5));
  c.request_id = 999;  // unknown: not an error
  mlpt::plugin::check(loaded().engine, loaded().e()->cancel(&c), "cancel");
}

TEST_CASE("pause holds new requests, load_weights swaps weights and version, resume lets them run") {
  TempDir dir("eng_pause");
  std::string ck_a = make_checkpoint(dir, "a", 11), ck_b = make_checkpoint(dir, "b", 12);
  Engine e(settings(ck_a));
  Trainer tb(settings(ck_b));
  GenerateOptions o;
  Generation before = generate(e, kPrompt, o);
  mlpt::plugin::check(loaded().engine, loaded().e()->pause(e.get()), "pause");
  std::atomic<bool> done{false};
  auto f = std::async(std::launch::async, [&] {
    Generation g = generate(e, kPrompt, o);
    done = true;
    return g;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  CHECK_FALSE(done.load());

  mlpt_export_weights_args ex{MLPT_EXPORT_WEIGHTS_ARGS_STRUCT_SIZE, tb.get()};
  mlpt::plugin::check(loaded().trainer, loaded().t()->export_weights(&ex), "export_weights");
  mlpt_load_weights_args lw{MLPT_LOAD_WEIGHTS_ARGS_STRUCT_SIZE, e.get(), 3, ex.out_tensors, ex.out_num_tensors - 1};
  try {  // one tensor short: refused, old weights kept
    mlpt::plugin::check(loaded().engine, loaded().e()->load_weights(&lw), "load_weights");
    FAIL("a missing tensor must be refused");
  } catch (const mlpt::Error& err) {
    CHECK(err.code() == MLPT_INVALID_ARGUMENT);
    CHECK_THAT(err.what(), Catch::Contains("lm_head.weight' is missing"));
  }
  lw.num_tensors = ex.out_num_tensors;
  mlpt::plugin::check(loaded().engine, loaded().e()->load_weights(&lw), "load_weights");
  lw.version = 2;
  CHECK_THROWS_WITH(mlpt::plugin::check(loaded().engine, loaded().e()->load_weights(&lw), "load_weights"),
                    Catch::Contains("not greater"));
  mlpt::plugin::check(loaded().engine, loaded().e()->resume(e.get()), "resume");
  Generation after = f.get();
  CHECK(after.version == 3);
  CHECK(before.version == 0);
  // The new weights are checkpoint b's: a fresh engine on b samples the same tokens.
  Engine eb(settings(ck_b));
  CHECK(after.tokens == generate(eb, kPrompt, o).tokens);
  CHECK(after.tokens != before.tokens);
}

TEST_CASE("R3: recorded experts replayed in the trainer reproduce the engine's routing and logprobs") {
  TempDir dir("eng_r3");
  std::string ck = make_checkpoint(dir, "ck", 13, sharp_config());
  Engine e(settings(ck));
  Trainer t(settings(ck));
  const int64_t L = 4, k = 2;
  GenerateOptions o;
  o.max_new = 14;
  o.record = true;
  Generation g = generate(e, kPrompt, o, L * k);
  const size_t total = kPrompt.size() + g.tokens.size();
  REQUIRE(g.routed.size() == total * L * k);
  for (int16_t x : g.routed) {
    CHECK(x >= 0);
    CHECK(x < 4);
  }
  // routed_experts_from skips the known prefix; the rest is the same record.
  GenerateOptions tail = o;
  tail.routed_from = kPrompt.size();
  Generation g2 = generate(e, kPrompt, tail, L * k);
  CHECK(std::equal(g2.routed.begin(), g2.routed.end(), g.routed.begin() + kPrompt.size() * L * k));

  Batch b;
  b.add(concat(kPrompt, g.tokens), kPrompt.size(), 0.0f);
  b.routed = g.routed;
  b.layers = L;
  b.k = k;
  std::vector<float> replayed = compute_logprobs(t, b);
  std::vector<float> tail_lp(replayed.begin() + kPrompt.size(), replayed.end());
  CHECK(max_diff(tail_lp, g.logprobs) < 1e-4);
  // The replay is really used: other experts give other logprobs.
  for (auto& x : b.routed) x = static_cast<int16_t>((x + 1) % 4);
  std::vector<float> other = compute_logprobs(t, b);
  CHECK(max_diff(other, replayed) > 1e-4);
  b.layers = 3;
  CHECK_THROWS_WITH(compute_logprobs(t, b), Catch::Contains("routed_experts are [token][3][2]"));
}

TEST_CASE("engine settings and requests are checked with clear errors") {
  TempDir dir("eng_errors");
  std::string ck = make_checkpoint(dir, "ck", 14);
  CHECK_THAT(create_error(MLPT_COMPONENT_ENGINE, settings(ck, R"("thread": 2)")), Catch::Contains("unknown key 'thread'"));
  CHECK_THAT(create_error(MLPT_COMPONENT_ENGINE, "{}"), Catch::Contains("checkpoint: missing"));
  CHECK_THAT(create_error(MLPT_COMPONENT_ENGINE, settings(dir / "nope")), Catch::Contains("nope/config.json"));
  CHECK_THAT(create_error(MLPT_COMPONENT_ENGINE, settings(ck, R"("threads": "two")")),
             Catch::Contains("threads: expected an integer"));
  CHECK_THAT(create_error(MLPT_COMPONENT_ENGINE, settings(ck, R"("sampling_vocab_size": 99)")),
             Catch::Contains("exceed the model's vocab_size 37"));
  Engine e(settings(ck));
  GenerateOptions o;
  CHECK_THROWS_WITH(generate(e, {1, 2, 40}, o), Catch::Contains("token 40 at position 2"));
  o.temperature = 0.0f;
  CHECK_THROWS_WITH(generate(e, {1, 2}, o), Catch::Contains("temperature must be > 0"));
  o.temperature = 1.0f;
  o.max_new = 0;
  CHECK_THROWS_WITH(generate(e, {1, 2}, o), Catch::Contains("max_new_tokens must be >= 1"));
}

TEST_CASE("padding rows beyond the tokenizer are never sampled") {
  TempDir dir("eng_pad");
  std::string ck = make_checkpoint(dir, "ck", 15);
  Engine e(settings(ck, R"("sampling_vocab_size": 5)"));
  GenerateOptions o;
  o.max_new = 64;
  o.temperature = 5.0f;  // flat: every id would appear without the mask
  for (int32_t tok : generate(e, {1, 2}, o).tokens) CHECK(tok < 5);
}
