// With the CUDA backend built, the mlpt_reference plugin also lists the qwen35_cuda trainer. Runs
// everywhere: without a usable GPU its creation must fail with an error naming the device (the
// GPU behaviour itself is tests/gpu/reference_cuda's).
#include "harness.hpp"

using namespace reftest;
using mlpt_test::TempDir;

TEST_CASE("the qwen35_cuda trainer is registered and names the device when it cannot start") {
  auto cuda = loaded().plugin->component(MLPT_COMPONENT_TRAINER, "qwen35_cuda");
  const auto* api = cuda.table<mlpt_trainer_api>();
  REQUIRE(api != nullptr);
  TempDir dir("cuda_component");
  const std::string settings = R"({"checkpoint": ")" + make_checkpoint(dir, "ck", 5) + R"(", "device": 0})";
  mlpt_trainer_create_args a{MLPT_TRAINER_CREATE_ARGS_STRUCT_SIZE, {settings.data(), settings.size()}, nullptr};
  std::string error;
  try {
    mlpt::plugin::check(cuda, api->create(&a), "create qwen35_cuda");
  } catch (const mlpt::Error& e) {
    error = e.what();
  }
  if (error.empty()) {  // a GPU is here: the trainer came up
    REQUIRE(a.trainer != nullptr);
    api->destroy(a.trainer);
  } else {
    INFO(error);
    CHECK(error.find("qwen35_cuda: CUDA device 0 is not available") != std::string::npos);
  }
  // Unknown settings are rejected by name before any device is touched.
  const std::string bad = R"({"checkpoint": "x", "devices": 1})";
  mlpt_trainer_create_args b{MLPT_TRAINER_CREATE_ARGS_STRUCT_SIZE, {bad.data(), bad.size()}, nullptr};
  CHECK_THROWS_WITH(mlpt::plugin::check(cuda, api->create(&b), "create qwen35_cuda"), Catch::Contains("'devices'"));
}
