// The loader's contract: what loads, what is refused, and that every refusal says what and where.
#include <unistd.h>

#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>

#include <atomic>
#include <cstring>

#include "core/components/instances.hpp"
#include "core/config/component_kinds.hpp"
#include "core/plugin/plugin.hpp"
#include "core/refit/weight_flow.hpp"
#include "mlpt/reward.h"

using mlpt::plugin::HostServices;
using mlpt::plugin::Plugin;

namespace {

std::filesystem::path variant(int defect) {
  return std::filesystem::path(MLPT_VARIANTS_DIR) / ("libc_plugin_" + std::to_string(defect) + ".so");
}

// Loads `path` expecting failure; returns the message.
std::string load_error(const std::filesystem::path& path, mlpt_error_code* code = nullptr) {
  HostServices host;
  try {
    Plugin::load(path, host);
  } catch (const mlpt::Error& e) {
    if (code) *code = e.code();
    return e.what();
  }
  FAIL("loading " << path << " was expected to fail");
  return {};
}

}  // namespace

TEST_CASE("a correct plain-C plugin loads and its component works through the C table") {
  HostServices host;
  auto plugin = Plugin::load(variant(0), host);
  CHECK(plugin->name() == "c-plugin");
  CHECK(plugin->version() == "1.0.0");
  CHECK(plugin->notes().empty());
  CHECK(plugin->build_info() == "plain C11");
  auto reward = plugin->component(MLPT_COMPONENT_REWARD);
  CHECK(reward.name == "nonempty_patch");
  auto* api = reward.table<mlpt_reward_api>();

  mlpt_reward_create_args create{MLPT_REWARD_CREATE_ARGS_STRUCT_SIZE, {"{}", 2}, nullptr};
  mlpt::plugin::check(reward, api->create(&create), "create");
  REQUIRE(create.reward != nullptr);
  std::string with_patch = R"({"patch": "diff --git a/x b/x"})", empty_patch = R"({"patch": ""})";
  mlpt_grade_args grade{};
  grade.struct_size = MLPT_GRADE_ARGS_STRUCT_SIZE;
  grade.reward = create.reward;
  grade.result_json = {with_patch.data(), with_patch.size()};
  mlpt::plugin::check(reward, api->grade(&grade), "grade");
  CHECK(grade.out_reward == 1.0);
  grade.result_json = {empty_patch.data(), empty_patch.size()};
  mlpt::plugin::check(reward, api->grade(&grade), "grade");
  CHECK(grade.out_reward == 0.0);

  // A component error crosses as an error object and becomes mlpt::Error with code and message.
  mlpt_reward_create_args bad{MLPT_REWARD_CREATE_ARGS_STRUCT_SIZE, {"{\"x\": 1}", 8}, nullptr};
  try {
    mlpt::plugin::check(reward, api->create(&bad), "create");
    FAIL("create with settings should fail");
  } catch (const mlpt::Error& e) {
    CHECK(e.code() == MLPT_INVALID_ARGUMENT);
    CHECK_THAT(e.what(), Catch::Contains("nonempty_patch takes no settings"));
  }
  api->destroy(create.reward);
}

TEST_CASE("a missing file, a non-ELF file and a directory are refused plainly") {
  auto dir = std::filesystem::temp_directory_path() / ("mlpt_loader_test." + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  mlpt_error_code code{};
  CHECK_THAT(load_error(dir / "does_not_exist.so", &code), Catch::Contains("file does not exist"));
  CHECK(code == MLPT_NOT_FOUND);
  std::ofstream(dir / "text.so") << "this is not a shared object\n";
  CHECK_THAT(load_error(dir / "text.so"), Catch::Contains("not a shared object"));
  CHECK_THAT(load_error(dir), Catch::Contains("not a regular file"));
  // An ELF file that is not a loadable library (truncated copy of a real plugin).
  {
    std::ifstream in(variant(0), std::ios::binary);
    std::string head(512, '\0');
    in.read(head.data(), 512);
    std::ofstream(dir / "truncated.so", std::ios::binary) << head;
  }
  CHECK_THAT(load_error(dir / "truncated.so"), Catch::Contains("dlopen failed"));
  std::filesystem::remove_all(dir);
}

TEST_CASE("the loader names each defect of a broken plugin") {
  mlpt_error_code code{};
  SECTION("no entry symbol") {
    CHECK_THAT(load_error(variant(1), &code), Catch::Contains("no entry point 'mlpt_plugin_init'"));
    CHECK(code == MLPT_NOT_FOUND);
  }
  SECTION("ABI major mismatch") {
    auto m = load_error(variant(2), &code);
    CHECK_THAT(m, Catch::Contains("built for ABI 2.0") && Catch::Contains("major mismatch"));
    CHECK(code == MLPT_FAILED_PRECONDITION);
  }
  SECTION("a required function missing") {
    CHECK_THAT(load_error(variant(4)), Catch::Contains("component 'nonempty_patch'") &&
                                           Catch::Contains("required function(s) not set: grade"));
  }
  SECTION("two components with one name") {
    CHECK_THAT(load_error(variant(5), &code), Catch::Contains("component 'dup'") && Catch::Contains("two components of one kind have this name"));
    CHECK(code == MLPT_ALREADY_EXISTS);
  }
  SECTION("the plugin refuses the host and says why") {
    CHECK_THAT(load_error(variant(6)), Catch::Contains("refused to load") && Catch::Contains("needs a host with GPUs"));
  }
  SECTION("the plugin refuses the host the 1.2 way: an error the host can destroy") {
    auto m = load_error(variant(14), &code);
    CHECK_THAT(m, Catch::Contains("refused to load with host ABI 1.2") && Catch::Contains("needs a host with GPUs"));
    CHECK(code == MLPT_FAILED_PRECONDITION);
  }
  SECTION("a descriptor smaller than ABI 1.0's") {
    CHECK_THAT(load_error(variant(7)), Catch::Contains("descriptor struct_size 8 is smaller than ABI 1.0's"));
  }
  SECTION("the entry point returns an error") {
    auto m = load_error(variant(8), &code);
    CHECK_THAT(m, Catch::Contains("entry point failed") && Catch::Contains("license server unreachable"));
    CHECK(code == MLPT_UNAVAILABLE);
  }
  SECTION("implausible capability record") {
    CHECK_THAT(load_error(variant(10)), Catch::Contains("capabilities struct_size 0 is implausible"));
  }
  SECTION("no function table") {
    CHECK_THAT(load_error(variant(11)), Catch::Contains("api table is NULL"));
  }
  SECTION("an unresolved symbol fails at load time, not at first call") {
    CHECK_THAT(load_error(variant(12)), Catch::Contains("dlopen failed") &&
                                            Catch::Contains("mlpt_test_symbol_nobody_defines"));
  }
}

TEST_CASE("minor versions: newer loads with a note, older 1.0 layout loads without new fields") {
  HostServices host;
  auto newer = Plugin::load(variant(3), host);
  REQUIRE(newer->notes().size() == 1);
  CHECK_THAT(newer->notes()[0], Catch::Contains("built for ABI 1.99") && Catch::Contains("it loads"));
  CHECK(newer->component(MLPT_COMPONENT_REWARD).name == "nonempty_patch");

  // A plugin compiled against 1.0: its descriptor ends before build_info (added in 1.1). The host
  // must accept it and must not read the field it does not have.
  auto older = Plugin::load(variant(9), host);
  CHECK(older->abi_version().major == 1);
  CHECK(older->abi_version().minor == 0);
  CHECK(older->notes().empty());
  CHECK(older->build_info().empty());
  CHECK(older->component(MLPT_COMPONENT_REWARD).name == "nonempty_patch");
}

TEST_CASE("component lookup by kind and name explains what exists") {
  HostServices host;
  auto plugin = Plugin::load(variant(0), host);
  CHECK_THAT([&] {
    try { plugin->component(MLPT_COMPONENT_ENGINE); } catch (const mlpt::Error& e) { return std::string(e.what()); }
    return std::string();
  }(), Catch::Contains("has no engine component"));
  CHECK_THAT([&] {
    try { plugin->component(MLPT_COMPONENT_REWARD, "other"); } catch (const mlpt::Error& e) { return std::string(e.what()); }
    return std::string();
  }(), Catch::Contains("no reward component 'other' (it has: nonempty_patch)"));
  CHECK(mlpt::config::kind_from_name("sandbox") == MLPT_COMPONENT_SANDBOX);
  CHECK_THROWS_WITH(mlpt::config::kind_from_name("gpu"), Catch::Contains("unknown component kind 'gpu'"));
}

TEST_CASE("a component outlives its plugin handle: the shared object stays mapped while used") {
  HostServices host;
  mlpt::plugin::Component reward;
  {
    auto plugin = Plugin::load(variant(0), host);
    reward = plugin->component(MLPT_COMPONENT_REWARD);
  }
  // The Component holds the plugin; its table must still be callable.
  mlpt_reward_create_args create{MLPT_REWARD_CREATE_ARGS_STRUCT_SIZE, {"", 0}, nullptr};
  mlpt::plugin::check(reward, reward.table<mlpt_reward_api>()->create(&create), "create");
  reward.table<mlpt_reward_api>()->destroy(create.reward);
}

// ---- ABI 1.2: older plugins through the host's adapters, extension chains, rendezvous ----

namespace {
std::filesystem::path old_plugin(const std::string& version) {
  return std::filesystem::path(MLPT_VARIANTS_DIR) / ("libold_plugin_" + version + ".so");
}
}  // namespace

TEST_CASE("plain-C plugins built against the 1.0 and 1.1 snapshots load and run a step in the 1.2 host") {
  for (std::string version : {"1_0", "1_1"}) {
    INFO("snapshot " << version);
    HostServices host;
    auto plugin = Plugin::load(old_plugin(version), host);
    CHECK(plugin->abi_version().minor == (version == "1_0" ? 0u : 1u));
    CHECK(plugin->negotiated_version().minor == plugin->abi_version().minor);
    CHECK(plugin->notes().empty());

    // A train step through the host's trainer wrapper: token j of a trained position moves
    // weight j by 0.5 * the sequence's advantage.
    mlpt::components::Trainer trainer(plugin->component(MLPT_COMPONENT_TRAINER), nlohmann::json::object());
    std::vector<int64_t> offsets{0, 3, 5};
    std::vector<int32_t> tokens{0, 1, 1, 3, 2};
    std::vector<uint8_t> mask{0, 1, 1, 1, 0};
    std::vector<float> advantages{1.0f, -2.0f};
    mlpt_train_batch batch{};
    batch.struct_size = MLPT_TRAIN_BATCH_STRUCT_SIZE;
    batch.num_sequences = 2;
    batch.offsets = offsets.data();
    batch.tokens = tokens.data();
    batch.loss_mask = mask.data();
    batch.advantages = advantages.data();
    uint64_t new_version = 0;
    auto metrics = trainer.train_step(batch, &new_version);
    CHECK(new_version == 1);
    REQUIRE(metrics.size() == 1);
    CHECK(metrics[0].value == Approx(-(0.5 + 0.5 - 1.0)));
    auto weights = trainer.export_weights();
    REQUIRE(weights.count == 1);
    const float* w = static_cast<const float*>(weights.tensors[0].tensor.data);
    CHECK(std::vector<float>(w, w + 4) == std::vector<float>{0.0f, 1.0f, 0.0f, -1.0f});

    // The weights across the old transport; `release` goes through the 1.1-shaped slot.
    auto transport = plugin->component(MLPT_COMPONENT_TRANSPORT);
    mlpt::components::Transport sender(transport, nlohmann::json::object(), MLPT_TRANSPORT_SENDER, "old");
    mlpt::components::Transport receiver(transport, nlohmann::json::object(), MLPT_TRANSPORT_RECEIVER, "old");
    sender.send(weights.version, weights.tensors, weights.count, 1000);
    auto got = receiver.receive(1, 1000);
    CHECK(got.version == 1);
    REQUIRE(got.count == 1);
    CHECK(std::memcmp(got.tensors[0].tensor.data, w, 4 * sizeof(float)) == 0);
    CHECK_NOTHROW(receiver.release(got.version));
    // A second release of the same version is the plugin's own precondition error, named.
    CHECK_THROWS_WITH(receiver.release(got.version), Catch::Contains("release of a version not held"));

    // The host's compatibility path (refit/weight_flow): a trainer without publish_weights and a
    // transport older than 1.2 cannot be bound, so the host hands the export to `send` as it is.
    CHECK_FALSE(trainer.publishes());
    CHECK_FALSE(sender.bindable());
    trainer.train_step(batch, &new_version);
    const auto published = mlpt::refit::publish(trainer, sender, 1000);
    CHECK_FALSE(published.by_plugin);
    CHECK(published.version == 2);
    CHECK(published.bytes == 4 * sizeof(float));
    auto second = receiver.receive(2, 1000);
    CHECK(second.version == 2);
    REQUIRE(second.count == 1);
    CHECK(std::memcmp(second.tensors[0].tensor.data, trainer.export_weights().tensors[0].tensor.data, 4 * sizeof(float)) == 0);
    CHECK_NOTHROW(receiver.release(second.version));
  }
}

TEST_CASE("extension chains: unknown entries are skipped, malformed and cyclic chains end the walk") {
  struct Private {
    mlpt_extension header;
    int payload;
  };
  const auto mine = static_cast<mlpt_extension_type>(MLPT_EXTENSION_TYPE_PRIVATE_BASE + 7);
  const auto unknown = static_cast<mlpt_extension_type>(0x7fff1234);
  Private wanted{{sizeof(Private), mine, nullptr}, 42};
  Private other{{sizeof(Private), unknown, &wanted.header}, 1};
  Private first{{sizeof(Private), unknown, &other.header}, 2};
  const mlpt_extension* found = mlpt_find_extension(&first.header, mine);
  REQUIRE(found == &wanted.header);
  CHECK(reinterpret_cast<const Private*>(found)->payload == 42);
  CHECK(mlpt_find_extension(&first.header, static_cast<mlpt_extension_type>(0x7fff0000)) == nullptr);
  CHECK(mlpt_find_extension(nullptr, mine) == nullptr);
  // An entry smaller than the header ends the walk rather than being read.
  Private broken{{4, unknown, &wanted.header}, 0};
  CHECK(mlpt_find_extension(&broken.header, mine) == nullptr);
  // A cycle (a bug) cannot hang the reader.
  Private a{{sizeof(Private), unknown, nullptr}, 0};
  Private b{{sizeof(Private), unknown, &a.header}, 0};
  a.header.next = &b.header;
  CHECK(mlpt_find_extension(&a.header, mine) == nullptr);
}

TEST_CASE("a descriptor with an extension chain of unknown entries loads") {
  HostServices host;
  auto plugin = Plugin::load(variant(13), host);
  CHECK(plugin->negotiated_version().minor == MLPT_ABI_VERSION_MINOR);
  CHECK(plugin->notes().empty());
  CHECK(plugin->component(MLPT_COMPONENT_REWARD).name == "nonempty_patch");
}

TEST_CASE("host services: one process alone, and a key-value store a 1.2 plugin rendezvous through") {
  HostServices host;
  const mlpt_host_services* h = host.table();
  REQUIRE(MLPT_HAS_FIELD(h, mlpt_host_services, barrier));
  REQUIRE(h->process != nullptr);
  CHECK(h->process->rank == 0);
  CHECK(h->process->world_size == 1);
  CHECK(h->process->role == MLPT_PROCESS_ROLE_ALL);

  mlpt_kv_put_args put{MLPT_KV_PUT_ARGS_STRUCT_SIZE, {"k", 1}, {"v1", 2}};
  CHECK(h->kv_put(h->ctx, &put) == nullptr);
  CHECK(h->kv_put(h->ctx, &put) == nullptr);  // the same value again is fine
  mlpt_kv_put_args other{MLPT_KV_PUT_ARGS_STRUCT_SIZE, {"k", 1}, {"v2", 2}};
  mlpt_error* e = h->kv_put(h->ctx, &other);
  REQUIRE(e != nullptr);
  CHECK(h->errors.error_code(e) == MLPT_ALREADY_EXISTS);
  h->errors.error_destroy(e);

  std::string value;
  mlpt_sink sink{MLPT_SINK_STRUCT_SIZE, &value,
                 [](void* ctx, const char* d, size_t n) { static_cast<std::string*>(ctx)->append(d, n); }};
  mlpt_kv_get_args get{MLPT_KV_GET_ARGS_STRUCT_SIZE, {"k", 1}, 100, &sink};
  CHECK(h->kv_get(h->ctx, &get) == nullptr);
  CHECK(value == "v1");
  // A key nobody puts: the timeout, named.
  mlpt_kv_get_args missing{MLPT_KV_GET_ARGS_STRUCT_SIZE, {"nobody", 6}, 50, &sink};
  e = h->kv_get(h->ctx, &missing);
  REQUIRE(e != nullptr);
  CHECK(h->errors.error_code(e) == MLPT_DEADLINE_EXCEEDED);
  CHECK_THAT(std::string(h->errors.error_message(e).data, h->errors.error_message(e).size), Catch::Contains("'nobody'"));
  h->errors.error_destroy(e);
  // A get without a limit ends once the run is cancelled.
  host.cancel();
  mlpt_kv_get_args forever{MLPT_KV_GET_ARGS_STRUCT_SIZE, {"nobody", 6}, -1, &sink};
  e = h->kv_get(h->ctx, &forever);
  REQUIRE(e != nullptr);
  CHECK(h->errors.error_code(e) == MLPT_CANCELLED);
  h->errors.error_destroy(e);
}

TEST_CASE("a 1.2 SDK plugin that needs the key-value store works in the 1.2 host") {
  HostServices host;
  auto plugin = Plugin::load(std::filesystem::path(MLPT_VARIANTS_DIR) / "libsdk_probe.so", host);
  CHECK(plugin->negotiated_version().minor == MLPT_ABI_VERSION_MINOR);
  auto rendezvous = plugin->component(MLPT_COMPONENT_TRANSPORT, "rendezvous");
  CHECK_NOTHROW(mlpt::components::Transport(rendezvous, nlohmann::json::object(), MLPT_TRANSPORT_SENDER, "g"));
  // What it put is visible to the host's store.
  CHECK(host.rendezvous().get("probe.rendezvous/g/sender", 0, std::atomic<bool>{false}) == "here");
  // It declares no max_sender_ranks (one sender): a sender that is one of two ranks is refused
  // before the plugin is called, naming the transport and the capability.
  const std::string name = "senders";
  const mlpt_component_group two{MLPT_COMPONENT_GROUP_STRUCT_SIZE, {name.data(), name.size()}, 1, 2};
  CHECK_THROWS_WITH(mlpt::components::Transport(rendezvous, nlohmann::json::object(), MLPT_TRANSPORT_SENDER, "g2", &two),
                    Catch::Contains("transport rendezvous takes at most 1 sender ranks (capabilities.max_sender_ranks)") &&
                        Catch::Contains("publishes from 2 ranks"));
  CHECK_THROWS_AS(host.rendezvous().get("probe.rendezvous/g2/sender", 0, std::atomic<bool>{false}), mlpt::Error);
}
