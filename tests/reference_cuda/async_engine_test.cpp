// The qwen35_cpu engine's asynchronous requests (ABI 1.2) through the C table: on_ready, poll,
// await, result and release as engine.h promises; results equal the blocking call's, routed
// experts per MoE layer and only as long as asked and generated; requests held by a pause and
// cancelled; hundreds in flight from one host thread.
#include <atomic>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <thread>

#include "harness.hpp"

using namespace reftest;
using mlpt_test::TempDir;

namespace {

const std::vector<int32_t> kPrompt{3, 14, 15, 9, 2, 6, 5, 35, 8, 9, 7, 9, 3, 2, 3, 8, 4, 6, 2, 6, 4};

const mlpt_engine_api* api() { return loaded().e(); }
void ok(mlpt_error* e, const std::string& what) { mlpt::plugin::check(loaded().engine, e, what); }
mlpt_error_code code_of(mlpt_error* e) {
  if (!e) return MLPT_OK;
  auto c = loaded().engine.errors().error_code(e);
  loaded().engine.errors().error_destroy(e);
  return c;
}

// Counts on_ready calls per request and the threads they ran on.
struct Readiness {
  std::atomic<int> calls{0};
  std::atomic<mlpt_engine_request*> last{nullptr};
  static void on_ready(void* self, mlpt_engine_request* r) {
    auto* s = static_cast<Readiness*>(self);
    s->last = r;
    ++s->calls;
  }
};

mlpt_submit_args submit_args(const Engine& e, const std::vector<int32_t>& prompt, uint64_t id, int32_t max_new,
                             Readiness* ready = nullptr) {
  mlpt_submit_args a{};
  a.struct_size = MLPT_SUBMIT_ARGS_STRUCT_SIZE;
  a.engine = e.get();
  a.request_id = id;
  a.tokens = prompt.data();
  a.num_tokens = prompt.size();
  a.sampling = {MLPT_SAMPLING_PARAMS_STRUCT_SIZE, 1.0f, 1.0f, 0, 1};
  a.max_new_tokens = max_new;
  a.on_ready = ready ? &Readiness::on_ready : nullptr;
  a.on_ready_user_data = ready;
  return a;
}

mlpt_engine_request* submit(mlpt_submit_args& a) {
  ok(api()->submit(&a), "submit");
  REQUIRE(a.out_request != nullptr);
  return a.out_request;
}
void await(const Engine& e, mlpt_engine_request* r) {
  mlpt_request_await_args a{MLPT_REQUEST_AWAIT_ARGS_STRUCT_SIZE, e.get(), r};
  ok(api()->request_await(&a), "request_await");
}
bool is_ready(const Engine& e, mlpt_engine_request* r) {
  mlpt_request_is_ready_args a{MLPT_REQUEST_IS_READY_ARGS_STRUCT_SIZE, e.get(), r, 0};
  ok(api()->request_is_ready(&a), "request_is_ready");
  return a.out_ready != 0;
}
mlpt_request_result_args result(const Engine& e, mlpt_engine_request* r) {
  mlpt_request_result_args a{};
  a.struct_size = MLPT_REQUEST_RESULT_ARGS_STRUCT_SIZE;
  a.engine = e.get();
  a.request = r;
  ok(api()->request_result(&a), "request_result");
  return a;
}
mlpt_error* release(const Engine& e, mlpt_engine_request* r) {
  mlpt_request_release_args a{MLPT_REQUEST_RELEASE_ARGS_STRUCT_SIZE, e.get(), r};
  return api()->request_release(&a);
}

int threads_now() {
  int n = 0;
  for (auto& t : std::filesystem::directory_iterator("/proc/self/task")) n += t.is_directory() ? 1 : 0;
  return n;
}

}  // namespace

TEST_CASE("a submitted request completes through on_ready, poll and await, and equals the blocking call") {
  TempDir dir("async_basic");
  Engine e(settings(make_checkpoint(dir, "ck", 21)));
  const int64_t L = 4, k = 2;  // the micro config
  GenerateOptions o;
  o.max_new = 12;
  o.record = true;
  o.routed_from = 5;
  Generation blocking = generate(e, kPrompt, o, L * k);

  Readiness ready;
  auto a = submit_args(e, kPrompt, 7, o.max_new, &ready);
  a.record_routed_experts = 1;
  a.routed_experts_from = 5;
  mlpt_engine_request* r = submit(a);
  await(e, r);
  CHECK(is_ready(e, r));
  // on_ready may run just after await returns (it is called once the request is ready).
  for (int i = 0; i < 1000 && ready.calls == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  CHECK(ready.calls == 1);
  CHECK(ready.last == r);
  auto res = result(e, r);
  std::vector<int32_t> tokens(res.out_tokens, res.out_tokens + res.out_num_tokens);
  CHECK(tokens == blocking.tokens);
  REQUIRE(res.out_logprobs != nullptr);
  for (size_t i = 0; i < res.out_num_tokens; ++i) CHECK(std::fabs(res.out_logprobs[i] - blocking.logprobs[i]) < 1e-5);
  CHECK(res.out_finish_reason == blocking.reason);
  CHECK(res.out_weight_version == 0);
  // Routing: one array per MoE layer, [position][k], for exactly the positions asked and generated.
  const size_t positions = kPrompt.size() + res.out_num_tokens - 5;
  CHECK(res.out_num_routed_positions == positions);
  REQUIRE(res.out_routed_experts != nullptr);
  REQUIRE(blocking.routed.size() == positions * L * k);
  for (int64_t l = 0; l < L; ++l)
    for (size_t p = 0; p < positions; ++p)
      for (int64_t j = 0; j < k; ++j) {
        INFO("layer " << l << " position " << p << " k " << j);
        REQUIRE(res.out_routed_experts[l][p * k + j] == blocking.routed[(p * L + l) * k + j]);
      }
  // The result can be read again, unchanged, until release.
  CHECK(result(e, r).out_tokens == res.out_tokens);
  CHECK(code_of(release(e, r)) == MLPT_OK);
}

TEST_CASE("release before ready is refused, and cancel makes a request ready with the tokens so far") {
  TempDir dir("async_cancel");
  nlohmann::json cfg = mlpt_test::micro_config_json();
  cfg["text_config"]["max_position_embeddings"] = 1 << 20;
  Engine e(settings(make_checkpoint(dir, "ck", 22, cfg)));
  auto a = submit_args(e, kPrompt, 8, 200000);
  mlpt_engine_request* r = submit(a);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  CHECK_FALSE(is_ready(e, r));
  CHECK(code_of(release(e, r)) == MLPT_FAILED_PRECONDITION);
  mlpt_request_result_args early{};
  early.struct_size = MLPT_REQUEST_RESULT_ARGS_STRUCT_SIZE;
  early.engine = e.get();
  early.request = r;
  CHECK(code_of(api()->request_result(&early)) == MLPT_FAILED_PRECONDITION);
  // A duplicate id in flight is refused at submit: no request exists, no callback.
  Readiness never;
  auto dup = submit_args(e, kPrompt, 8, 4, &never);
  CHECK(code_of(api()->submit(&dup)) == MLPT_FAILED_PRECONDITION);
  mlpt_cancel_args c{MLPT_CANCEL_ARGS_STRUCT_SIZE, e.get(), 8};
  ok(api()->cancel(&c), "cancel");
  await(e, r);
  auto res = result(e, r);
  CHECK(res.out_finish_reason == MLPT_FINISH_CANCELLED);
  CHECK(res.out_num_tokens < 200000);
  CHECK(code_of(release(e, r)) == MLPT_OK);
  CHECK(never.calls == 0);
}

TEST_CASE("requests submitted while paused start after resume, and a held request can be cancelled") {
  TempDir dir("async_pause");
  Engine e(settings(make_checkpoint(dir, "ck", 23)));
  mlpt_engine_pause_args p{MLPT_ENGINE_PAUSE_ARGS_STRUCT_SIZE, e.get()};
  ok(api()->pause_generation(&p), "pause_generation");
  CHECK(code_of(api()->pause_generation(&p)) == MLPT_FAILED_PRECONDITION);  // does not nest
  auto a1 = submit_args(e, kPrompt, 1, 6), a2 = submit_args(e, kPrompt, 2, 6);
  mlpt_engine_request* held = submit(a1);
  mlpt_engine_request* cancelled = submit(a2);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  CHECK_FALSE(is_ready(e, held));
  mlpt_cancel_args c{MLPT_CANCEL_ARGS_STRUCT_SIZE, e.get(), 2};
  ok(api()->cancel(&c), "cancel");
  await(e, cancelled);  // ends at once, paused or not
  CHECK(result(e, cancelled).out_finish_reason == MLPT_FINISH_CANCELLED);
  CHECK(result(e, cancelled).out_num_tokens == 0);
  CHECK_FALSE(is_ready(e, held));
  mlpt_engine_resume_args rs{MLPT_ENGINE_RESUME_ARGS_STRUCT_SIZE, e.get()};
  ok(api()->resume_generation(&rs), "resume_generation");
  await(e, held);
  CHECK(result(e, held).out_num_tokens == 6);
  CHECK(code_of(release(e, held)) == MLPT_OK);
  CHECK(code_of(release(e, cancelled)) == MLPT_OK);
  mlpt_engine_model_info_args info{};
  info.struct_size = MLPT_ENGINE_MODEL_INFO_ARGS_STRUCT_SIZE;
  info.engine = e.get();
  info.out_info.struct_size = MLPT_ENGINE_MODEL_INFO_STRUCT_SIZE;
  ok(api()->query_model_info(&info), "query_model_info");
  CHECK(info.out_info.vocab_size == 37);
  CHECK(info.out_info.num_moe_layers == 4);
}

TEST_CASE("300 requests in flight from one host thread: every one completes once, no thread per request") {
  TempDir dir("async_many");
  Engine e(settings(make_checkpoint(dir, "ck", 24)));
  Generation warm = generate(e, kPrompt, GenerateOptions{});  // the engine's threads exist from here on
  const int baseline = threads_now();
  const int n = 300;
  std::vector<Readiness> ready(n);
  std::vector<mlpt_engine_request*> requests;
  int peak = baseline;
  for (int i = 0; i < n; ++i) {
    auto a = submit_args(e, kPrompt, 1000 + static_cast<uint64_t>(i), 5, &ready[static_cast<size_t>(i)]);
    a.sampling.seed = static_cast<uint64_t>(i);
    requests.push_back(submit(a));
    peak = std::max(peak, threads_now());
  }
  for (auto* r : requests) {
    await(e, r);
    peak = std::max(peak, threads_now());
  }
  for (int i = 0; i < 1000; ++i) {
    int sum = 0;
    for (auto& r : ready) sum += r.calls;
    if (sum == n) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  for (int i = 0; i < n; ++i) {
    CHECK(ready[static_cast<size_t>(i)].calls == 1);
    CHECK(result(e, requests[static_cast<size_t>(i)]).out_num_tokens == 5);
    CHECK(code_of(release(e, requests[static_cast<size_t>(i)])) == MLPT_OK);
  }
  CHECK(peak == baseline);
}
