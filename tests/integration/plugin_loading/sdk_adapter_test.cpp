// The SDK adapters seen from the host: C++ exceptions become error objects with the right code,
// undersized argument structs are refused instead of read past, and the example plugin works.
#include <catch2/catch.hpp>

#include <vector>

#include "core/components/instances.hpp"
#include "core/plugin/plugin.hpp"
#include "core/plugin/plugin_dirs.hpp"
#include "mlpt/engine.h"
#include "mlpt/reward.h"
#include "mlpt/trainer.h"

using mlpt::plugin::HostServices;
using mlpt::plugin::Plugin;

namespace {

struct Probe {
  HostServices host;
  std::shared_ptr<Plugin> plugin = Plugin::load(std::string(MLPT_VARIANTS_DIR) + "/libsdk_probe.so", host);
  mlpt::plugin::Component engine = plugin->component(MLPT_COMPONENT_ENGINE, "probe");
  const mlpt_engine_api* api = engine.table<mlpt_engine_api>();
};

// Calls generate on a one-token prompt and returns the error code (MLPT_OK for success).
mlpt_error_code generate_code(Probe& p, mlpt_engine* e, int32_t first, std::string* message = nullptr,
                              size_t struct_size = MLPT_GENERATE_ARGS_STRUCT_SIZE) {
  int32_t prompt[2] = {first, 3};
  int32_t out[4];
  float logprobs[4];
  mlpt_generate_args a{};
  a.struct_size = struct_size;
  a.engine = e;
  a.tokens = prompt;
  a.num_tokens = 2;
  a.sampling.struct_size = MLPT_SAMPLING_PARAMS_STRUCT_SIZE;  // the SDK checks it
  a.max_new_tokens = 4;
  a.out_tokens = out;
  a.out_logprobs = logprobs;
  mlpt_error* err = p.api->generate(&a);
  if (!err) {
    CHECK(a.out_num_tokens == 2);
    CHECK(out[0] == first);
    CHECK(logprobs[1] == -1.0f);
    return MLPT_OK;
  }
  auto code = p.engine.errors().error_code(err);
  if (message) {
    auto m = p.engine.errors().error_message(err);
    *message = std::string(m.data, m.size);
  }
  p.engine.errors().error_destroy(err);
  return code;
}

}  // namespace

TEST_CASE("SDK: exceptions map to error codes with the call named") {
  Probe p;
  mlpt_engine_create_args c{MLPT_ENGINE_CREATE_ARGS_STRUCT_SIZE, {"{}", 2}, nullptr};
  mlpt::plugin::check(p.engine, p.api->create(&c), "create");
  std::string message;
  CHECK(generate_code(p, c.engine, 5) == MLPT_OK);
  CHECK(generate_code(p, c.engine, 666, &message) == MLPT_INTERNAL);
  CHECK_THAT(message, Catch::Contains("engine.generate: token 666 is out of range"));
  CHECK(generate_code(p, c.engine, 777, &message) == MLPT_RESOURCE_EXHAUSTED);
  CHECK_THAT(message, Catch::Contains("out of memory"));
  CHECK(generate_code(p, c.engine, 888, &message) == MLPT_UNKNOWN);
  // An args struct smaller than ABI 1.0's is refused before any field is read.
  CHECK(generate_code(p, c.engine, 5, &message, 16) == MLPT_INVALID_ARGUMENT);
  CHECK_THAT(message, Catch::Contains("mlpt_generate_args.struct_size is 16"));

  mlpt_engine_model_info info{};
  info.struct_size = MLPT_ENGINE_MODEL_INFO_STRUCT_SIZE;
  mlpt::plugin::check(p.engine, p.api->model_info(c.engine, &info), "model_info");
  CHECK(info.vocab_size == 7);
  mlpt_load_weights_args w{MLPT_LOAD_WEIGHTS_ARGS_STRUCT_SIZE, c.engine, 0, nullptr, 0};
  CHECK_THROWS_WITH(mlpt::plugin::check(p.engine, p.api->load_weights(&w), "load_weights"),
                    Catch::Contains("version 0 is not newer than 0"));
  w.version = 3;
  mlpt::plugin::check(p.engine, p.api->load_weights(&w), "load_weights");
  mlpt::plugin::check(p.engine, p.api->model_info(c.engine, &info), "model_info");
  CHECK(info.weight_version == 3);
  p.api->destroy(c.engine);
}

TEST_CASE("SDK: a request completed inside submit calls on_ready first and may be released there") {
  Probe p;
  mlpt_engine_create_args c{MLPT_ENGINE_CREATE_ARGS_STRUCT_SIZE, {"{}", 2}, nullptr};
  mlpt::plugin::check(p.engine, p.api->create(&c), "create");
  struct Seen {
    const Probe* probe;
    mlpt_engine* engine;
    int calls = 0;
    std::vector<int32_t> tokens;
    mlpt_error_code released = MLPT_UNKNOWN;
  } seen{&p, c.engine};
  int32_t prompt[3] = {4, 5, 6};
  mlpt_submit_args a{};
  a.struct_size = MLPT_SUBMIT_ARGS_STRUCT_SIZE;
  a.engine = c.engine;
  a.request_id = 1;
  a.tokens = prompt;
  a.num_tokens = 3;
  a.sampling.struct_size = MLPT_SAMPLING_PARAMS_STRUCT_SIZE;
  a.max_new_tokens = 2;
  a.on_ready_user_data = &seen;
  a.on_ready = [](void* user, mlpt_engine_request* r) {  // reads its result and releases it here
    auto* s = static_cast<Seen*>(user);
    ++s->calls;
    mlpt_request_result_args res{};
    res.struct_size = MLPT_REQUEST_RESULT_ARGS_STRUCT_SIZE;
    res.engine = s->engine;
    res.request = r;
    if (mlpt_error* e = s->probe->api->request_result(&res)) return s->probe->engine.errors().error_destroy(e);
    s->tokens.assign(res.out_tokens, res.out_tokens + res.out_num_tokens);
    mlpt_request_release_args rel{MLPT_REQUEST_RELEASE_ARGS_STRUCT_SIZE, s->engine, r};
    mlpt_error* e = s->probe->api->request_release(&rel);
    s->released = e ? s->probe->engine.errors().error_code(e) : MLPT_OK;
    s->probe->engine.errors().error_destroy(e);
  };
  mlpt::plugin::check(p.engine, p.api->submit(&a), "submit");
  CHECK(seen.calls == 1);  // before submit returned
  CHECK(seen.tokens == std::vector<int32_t>{4, 5});
  CHECK(seen.released == MLPT_OK);
  // A refused request (the probe throws on 666) gives an error and never calls on_ready.
  prompt[0] = 666;
  a.request_id = 2;
  mlpt_error* err = p.api->submit(&a);
  REQUIRE(err != nullptr);
  CHECK(p.engine.errors().error_code(err) == MLPT_INTERNAL);
  p.engine.errors().error_destroy(err);
  CHECK(seen.calls == 1);
  p.api->destroy(c.engine);
}

TEST_CASE("SDK: a constructor that throws gives an error and no object") {
  Probe p;
  mlpt_engine_create_args c{MLPT_ENGINE_CREATE_ARGS_STRUCT_SIZE, {R"({"fail": "create"})", 18}, nullptr};
  mlpt_error* err = p.api->create(&c);
  REQUIRE(err != nullptr);
  CHECK(p.engine.errors().error_code(err) == MLPT_FAILED_PRECONDITION);
  p.engine.errors().error_destroy(err);
  CHECK(c.engine == nullptr);
  p.api->destroy(nullptr);  // documented no-op
}

TEST_CASE("SDK example plugin: the exact-answer reward grades through the C table") {
  HostServices host;
  auto plugin = Plugin::load(std::string(MLPT_PLUGIN_DIR) + "/libmlpt_example.so", host);
  auto reward = plugin->component(MLPT_COMPONENT_REWARD, "exact_answer");
  auto* api = reward.table<mlpt_reward_api>();
  mlpt_reward_create_args c{MLPT_REWARD_CREATE_ARGS_STRUCT_SIZE, {"{}", 2}, nullptr};
  mlpt::plugin::check(reward, api->create(&c), "create");
  auto grade = [&](std::string task, std::string result) {
    mlpt_grade_args g{};
    g.struct_size = MLPT_GRADE_ARGS_STRUCT_SIZE;
    g.reward = c.reward;
    g.task_json = {task.data(), task.size()};
    g.result_json = {result.data(), result.size()};
    mlpt::plugin::check(reward, api->grade(&g), "grade");
    return g.out_reward;
  };
  CHECK(grade(R"({"answer": "42"})", R"({"answer": " 42\n"})") == 1.0);
  CHECK(grade(R"({"answer": "42"})", R"({"answer": "41"})") == 0.0);
  CHECK(grade(R"({"answer": "42"})", R"({})") == 0.0);
  CHECK_THROWS_WITH(grade(R"({"question": "?"})", R"({})"), Catch::Contains("no string field \"answer\""));
  api->destroy(c.reward);
}

TEST_CASE("SDK: a trainer's data-parallel replica reaches the host through create's out fields") {
  HostServices host;
  auto plugin = Plugin::load(std::string(MLPT_VARIANTS_DIR) + "/libsdk_probe.so", host);
  auto paired = plugin->component(MLPT_COMPONENT_TRAINER, "paired");
  const std::string name = "trainer";
  const mlpt_component_group rank3{MLPT_COMPONENT_GROUP_STRUCT_SIZE, {name.data(), name.size()}, 3, 4};
  // Rank 3 of 4 in pairs: replica 1 of 2, written into the args and read by the host's wrapper.
  mlpt::components::Trainer trainer(paired, nlohmann::json::object(), &rank3);
  CHECK(trainer.data_parallel().rank == 1);
  CHECK(trainer.data_parallel().size == 2);
  // A trainer that leaves the fields 0 is a replica of its own: the group rank of the group size.
  mlpt::components::Trainer alone(paired, nlohmann::json::object());
  CHECK(alone.data_parallel().rank == 0);
  CHECK(alone.data_parallel().size == 1);
  // A replica outside the range trainer.h allows is refused by the host, naming it.
  CHECK_THROWS_WITH(mlpt::components::Trainer(paired, {{"replica", {2, 2}}}, &rank3),
                    Catch::Contains("data-parallel replica 2 of 2"));
  CHECK_THROWS_WITH(mlpt::components::Trainer(paired, {{"replica", {0, 3}}}, &rank3),
                    Catch::Contains("data-parallel replica 0 of 3"));

  // A 1.2 host from before the out fields (args ending at extension_start) cannot give the pairs
  // the same share: the SDK refuses at create rather than train on different shares.
  const auto* api = paired.table<mlpt_trainer_api>();
  mlpt_trainer_create_args old{};
  old.struct_size = MLPT_STRUCT_SIZE(mlpt_trainer_create_args, extension_start);
  old.config_json = {"{}", 2};
  old.component_group = &rank3;
  mlpt_error* err = api->create(&old);
  REQUIRE(err != nullptr);
  CHECK(paired.errors().error_code(err) == MLPT_FAILED_PRECONDITION);
  const auto message = paired.errors().error_message(err);
  CHECK_THAT(std::string(message.data, message.size), Catch::Contains("out_data_parallel_rank"));
  paired.errors().error_destroy(err);
  CHECK(old.trainer == nullptr);
  // ... but a rank that is a replica of its own needs nothing from it.
  const mlpt_component_group one{MLPT_COMPONENT_GROUP_STRUCT_SIZE, {name.data(), name.size()}, 0, 1};
  old.component_group = &one;
  mlpt::plugin::check(paired, api->create(&old), "create");
  CHECK(old.trainer != nullptr);
  api->destroy(old.trainer);
}
