// With the CUDA backend built, the mlpt_reference plugin also lists the qwen35_cuda trainer and
// engine. Runs everywhere: without a usable GPU their creation must fail with an error naming the
// device (the GPU behaviour itself is tests/reference_cuda/backends/cuda's).
#include "harness.hpp"

using namespace reftest;
using mlpt_test::TempDir;

namespace {
// Creates `component` with `settings`: the error's text, or "" after creating and
// destroying it (a GPU is here).
template <class Api, class Args>
std::string create_error(mlpt::plugin::Component& component, const std::string& settings, size_t struct_size) {
  const auto* api = component.table<Api>();
  REQUIRE(api != nullptr);
  Args a{};
  a.struct_size = struct_size;
  a.config_json = {settings.data(), settings.size()};
  try {
    mlpt::plugin::check(component, api->create(&a), "create qwen35_cuda");
  } catch (const mlpt::Error& e) {
    return e.what();
  }
  if constexpr (std::is_same_v<Api, mlpt_engine_api>) {
    REQUIRE(a.engine != nullptr);
    api->destroy(a.engine);
  } else {
    REQUIRE(a.trainer != nullptr);
    api->destroy(a.trainer);
  }
  return "";
}

std::string trainer_error(const std::string& settings) {
  auto c = loaded().plugin->component(MLPT_COMPONENT_TRAINER, "qwen35_cuda");
  return create_error<mlpt_trainer_api, mlpt_trainer_create_args>(c, settings, MLPT_TRAINER_CREATE_ARGS_STRUCT_SIZE);
}
std::string engine_error(const std::string& settings) {
  auto c = loaded().plugin->component(MLPT_COMPONENT_ENGINE, "qwen35_cuda");
  return create_error<mlpt_engine_api, mlpt_engine_create_args>(c, settings, MLPT_ENGINE_CREATE_ARGS_STRUCT_SIZE);
}
}  // namespace

TEST_CASE("the qwen35_cuda trainer is registered, names the device when it cannot start, refuses layouts it cannot take") {
  TempDir dir("cuda_component");
  const std::string error = trainer_error(R"({"checkpoint": ")" + make_checkpoint(dir, "ck", 5) + R"(", "device": 0})");
  INFO(error);  // empty: a GPU is here and the trainer came up
  CHECK((error.empty() || error.find("trainer qwen35_cuda: CUDA device 0 is not available") != std::string::npos));
  // Unknown settings are rejected by name before any device is touched.
  CHECK_THAT(trainer_error(R"({"checkpoint": "x", "devices": 1})"), Catch::Contains("'devices'"));
  // A layout the trainer's group cannot take is refused by name before any device is touched:
  // expert or tensor parallelism without a group of that many ranks.
  CHECK_THAT(trainer_error(R"({"checkpoint": "x", "expert_parallel": 2})"),
             Catch::Contains("of 1 ranks does not split") && Catch::Contains("expert_parallel 2"));
  CHECK_THAT(trainer_error(R"({"checkpoint": "x", "tensor_parallel": 2})"),
             Catch::Contains("of 1 ranks does not split") && Catch::Contains("tensor_parallel 2"));
}

TEST_CASE("the qwen35_cuda engine is registered, names the device when it cannot start, refuses layouts it cannot take") {
  CHECK(loaded().plugin->component(MLPT_COMPONENT_ENGINE, "qwen35_cuda").description.find("CUDA") != std::string::npos);
  TempDir dir("cuda_engine_component");
  const std::string error = engine_error(R"({"checkpoint": ")" + make_checkpoint(dir, "ck", 5) +
                                         R"(", "device": 0, "kv_cache_bytes": 1048576, "kv_block_size": 8})");
  INFO(error);  // empty: a GPU is here and the engine came up
  CHECK((error.empty() || error.find("engine qwen35_cuda: CUDA device 0 is not available") != std::string::npos));
  // Settings are checked by name before any device is touched: unknown keys, and the CPU
  // backend's `threads` is not the CUDA backend's.
  CHECK_THAT(engine_error(R"({"checkpoint": "x", "kv_blocks": 1})"), Catch::Contains("unknown key 'kv_blocks'"));
  CHECK_THAT(engine_error(R"({"checkpoint": "x", "threads": 2})"), Catch::Contains("unknown key 'threads'"));
  // Model parallelism without an engine group of that many ranks, before any device is touched.
  CHECK_THAT(engine_error(R"({"checkpoint": "x", "expert_parallel": 2})"),
             Catch::Contains("expert_parallel 2") && Catch::Contains("need an engine group of 2 ranks"));
  CHECK_THAT(engine_error(R"({"checkpoint": "x", "tensor_parallel": 2})"),
             Catch::Contains("tensor_parallel 2") && Catch::Contains("need an engine group of 2 ranks"));
}
