// The host's adapter per ABI version (core/components/abi_1_0.cpp, abi_1_2.cpp) on the frozen 1.0
// and 1.1 plugins: what 1.2 added and an older transport would ignore (shard descriptors, a device
// event to wait for, a wanted layout, a binding) is refused with the version named, never handed
// over; what the version has (whole tensors, `release` in its 1.0 form) works.
#include "core/components/abi_adapter.hpp"

#include <catch2/catch.hpp>
#include <filesystem>
#include <string>
#include <vector>

#include "core/components/instances.hpp"
#include "core/plugin/plugin.hpp"

using mlpt::plugin::HostServices;
using mlpt::plugin::Plugin;

TEST_CASE("one adapter per version: 1.0 and 1.1 carry none of 1.2's additions, 1.2 carries all") {
  const auto& old = mlpt::components::abi_adapter(0);
  CHECK(&mlpt::components::abi_adapter(1) == &old);  // 1.1 changed no component's calls
  CHECK_FALSE((old.component_groups || old.shards || old.device_ready || old.bindings));
  CHECK(old.transport_send_args_size == MLPT_TRANSPORT_SEND_ARGS_STRUCT_SIZE_1_0);
  const auto& current = mlpt::components::abi_adapter(MLPT_ABI_VERSION_MINOR);
  CHECK(current.minor == MLPT_ABI_VERSION_MINOR);
  CHECK((current.component_groups && current.shards && current.device_ready && current.bindings));
  CHECK(current.transport_receive_args_size == MLPT_TRANSPORT_RECEIVE_ARGS_STRUCT_SIZE);
}

TEST_CASE("a 1.0 or 1.1 transport is refused what it would ignore, naming its version, and works whole") {
  for (std::string version : {"1_0", "1_1"}) {
    INFO("snapshot " << version);
    HostServices host;
    auto plugin =
        Plugin::load(std::filesystem::path(MLPT_VARIANTS_DIR) / ("libold_plugin_" + version + ".so"), host);
    const std::string named = "speaks ABI 1." + std::string(version == "1_0" ? "0" : "1");
    auto component = plugin->component(MLPT_COMPONENT_TRANSPORT);
    mlpt::components::Transport sender(component, nlohmann::json::object(), MLPT_TRANSPORT_SENDER, "adapter");
    mlpt::components::Transport receiver(component, nlohmann::json::object(), MLPT_TRANSPORT_RECEIVER,
                                         "adapter");
    CHECK_FALSE(sender.bindable());

    std::vector<float> data{1.0f, 2.0f, 3.0f, 4.0f};
    int64_t shape[1] = {2}, global[1] = {4}, offset[1] = {2};
    mlpt_named_tensor t{MLPT_NAMED_TENSOR_STRUCT_SIZE,
                        {"w", 1},
                        DLTensor{data.data() + 2, {kDLCPU, 0}, 1, {kDLFloat, 32, 1}, shape, nullptr, 0}};
    const mlpt_tensor_shard half{MLPT_TENSOR_SHARD_STRUCT_SIZE, global, offset};
    CHECK_THROWS_WITH(sender.send(1, &t, 1, 1000, &half),
                      Catch::Contains(named) && Catch::Contains("whole tensors only"));
    const mlpt_device_ready later{MLPT_DEVICE_READY_STRUCT_SIZE, MLPT_READY_AFTER_EVENT, nullptr,
                                  reinterpret_cast<void*>(1)};
    CHECK_THROWS_WITH(sender.send(1, &t, 1, 1000, nullptr, &later),
                      Catch::Contains(named) && Catch::Contains("device event"));
    const mlpt::sdk::TensorLayout want{&t, &half, 1};
    CHECK_THROWS_WITH(receiver.receive(1, 1000, want), Catch::Contains(named) && Catch::Contains("shards"));

    // Whole tensors, ready on return: sent, received and released through the 1.0 form.
    t.tensor.data = data.data();
    shape[0] = 4;
    sender.send(1, &t, 1, 1000);
    const auto got = receiver.receive(1, 1000);
    REQUIRE(got.count == 1);
    CHECK(got.shards == nullptr);
    CHECK(got.ready.kind == MLPT_READY_ON_RETURN);  // zeroed: an older transport says nothing of readiness
    CHECK(static_cast<const float*>(got.tensors[0].tensor.data)[3] == 4.0f);
    CHECK_NOTHROW(receiver.release(got.version));
  }
}
