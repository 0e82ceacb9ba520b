// The cost of one call through an ABI function table (a dlopen'ed plugin, args struct, error return,
// SDK exception guard) against a direct C++ virtual call doing the same work, in the same process.
#include <chrono>
#include <cstdio>

#include "core/plugin/plugin.hpp"
#include "mlpt/engine.h"

namespace {

struct Engine {
  virtual ~Engine() = default;
  virtual void model_info(mlpt_engine_model_info& info) = 0;
};
struct Direct final : Engine {
  void model_info(mlpt_engine_model_info& info) override {
    info.vocab_size = 7;
    info.max_sequence_length = 32;
    info.weight_version = 0;
  }
};

template <class F>
double ns_per_call(F&& f, long n) {
  auto t0 = std::chrono::steady_clock::now();
  for (long i = 0; i < n; ++i) f();
  return std::chrono::duration<double, std::nano>(std::chrono::steady_clock::now() - t0).count() / n;
}

}  // namespace

int main() {
  mlpt::plugin::HostServices host;
  auto plugin = mlpt::plugin::Plugin::load(std::string(MLPT_VARIANTS_DIR) + "/libsdk_probe.so", host);
  auto component = plugin->component(MLPT_COMPONENT_ENGINE, "probe");
  auto* api = component.table<mlpt_engine_api>();
  mlpt_engine_create_args c{MLPT_ENGINE_CREATE_ARGS_STRUCT_SIZE, {"{}", 2}, nullptr};
  mlpt::plugin::check(component, api->create(&c), "create");

  Engine* volatile direct = new Direct();  // volatile: the compiler cannot devirtualize the call
  mlpt_engine_model_info info{};
  info.struct_size = MLPT_ENGINE_MODEL_INFO_STRUCT_SIZE;
  const long n = 50'000'000;
  volatile int64_t sink = 0;
  double best_abi = 1e9, best_virtual = 1e9;
  for (int rep = 0; rep < 5; ++rep) {
    best_virtual = std::min(best_virtual, ns_per_call([&] { direct->model_info(info); sink = sink + info.vocab_size; }, n));
    best_abi = std::min(best_abi, ns_per_call([&] {
      mlpt_error* e = api->model_info(c.engine, &info);
      if (e) component.errors().error_destroy(e);
      sink = sink + info.vocab_size;
    }, n));
  }
  std::printf("%-44s %10s\n", "call", "ns/call");
  std::printf("%-44s %10.2f\n", "C++ virtual call (baseline)", best_virtual);
  std::printf("%-44s %10.2f\n", "ABI table call (dlopen'ed plugin, SDK guard)", best_abi);
  std::printf("%-44s %10.2fx\n", "ratio ABI / virtual", best_abi / best_virtual);
  api->destroy(c.engine);
  delete direct;
  return 0;
}
