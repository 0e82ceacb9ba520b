// Weights plugin to plugin (transport.h, trainer.h publish_weights, engine.h fetch_weights): two
// trainer ranks holding rows (rows split in 2) publish through the in-process transport, three
// engine ranks holding columns (columns split in 3) fetch their own layout; what each engine loaded
// equals the dense tensors bit for bit. The host only passes bound endpoints: the calls it makes
// return versions and byte counts, never tensors, and the transport reports that it cut exactly one
// dense model's worth of bytes for the three engines together (nobody gathered the whole model).
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <mutex>

#include "core/components/instances.hpp"
#include "core/plugin/host_services.hpp"
#include "core/plugin/plugin.hpp"
#include "core/refit/weight_flow.hpp"
#include "weight_values.hpp"

using namespace mlpt;
namespace fs = std::filesystem;

namespace {

std::vector<float> read_floats(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), {});
  std::vector<float> out(bytes.size() / 4);
  std::memcpy(out.data(), bytes.data(), out.size() * 4);
  return out;
}

bool same_bits(float a, float b) { return std::memcmp(&a, &b, 4) == 0; }

struct Setup {
  std::unique_ptr<plugin::HostServices> host = std::make_unique<plugin::HostServices>();
  std::mutex metrics_mutex;
  std::map<std::string, double> metric_sums;
  std::shared_ptr<plugin::Plugin> sharded, transport;
  fs::path dump = fs::temp_directory_path() / ("mlpt-weight-flow-" + std::to_string(::getpid()));

  Setup() {
    host->set_metric_sink([this](const std::string& name, double value) {
      std::lock_guard l(metrics_mutex);
      metric_sums[name] += value;
    });
    sharded = plugin::Plugin::load(std::string(WEIGHT_FLOW_PLUGIN), *host);
    transport = plugin::Plugin::load(std::string(MLPT_PLUGIN_DIR) + "/libmlpt_transport_inprocess.so", *host);
    fs::remove_all(dump);
  }
  ~Setup() { fs::remove_all(dump); }
};

}  // namespace

TEST_CASE("2 trainer ranks (rows) publish, 3 engine ranks (columns) fetch their layout: equal to the dense tensors bit for bit") {
  Setup s;
  const auto tc = s.transport->component(MLPT_COMPONENT_TRANSPORT, "inprocess");
  const std::string group = "weight-flow-" + std::to_string(::getpid()), trainer_group = "trainer";
  std::vector<std::unique_ptr<components::Trainer>> trainers;
  std::vector<std::unique_ptr<components::Transport>> senders, receivers;
  std::vector<std::unique_ptr<components::Engine>> engines;
  for (int32_t r = 0; r < 2; ++r) {
    const mlpt_component_group g{MLPT_COMPONENT_GROUP_STRUCT_SIZE, {trainer_group.data(), trainer_group.size()}, r, 2};
    trainers.push_back(std::make_unique<components::Trainer>(s.sharded->component(MLPT_COMPONENT_TRAINER, "rows"), nlohmann::json::object(), &g));
    senders.push_back(std::make_unique<components::Transport>(tc, nlohmann::json{{"receivers", 3}}, MLPT_TRANSPORT_SENDER, group, &g));
  }
  for (int e = 0; e < 3; ++e) {
    engines.push_back(std::make_unique<components::Engine>(s.sharded->component(MLPT_COMPONENT_ENGINE, "columns"),
                                                           nlohmann::json{{"rank", e}, {"ranks", 3}, {"dump_dir", s.dump.string()}}));
    receivers.push_back(std::make_unique<components::Transport>(tc, nlohmann::json::object(), MLPT_TRANSPORT_RECEIVER, group));
  }
  // Every side speaks 1.2: the trainer sends and the engine receives by itself.
  for (auto& t : trainers) REQUIRE(t->publishes());
  for (auto& e : engines) REQUIRE(e->fetches());
  REQUIRE(senders[0]->bindable());

  for (uint64_t version : {1u, 2u}) {
    INFO("version " << version);
    if (version > 1) {
      const int64_t offsets[1] = {0};
      mlpt_train_batch empty{};
      empty.struct_size = MLPT_TRAIN_BATCH_STRUCT_SIZE;
      empty.offsets = offsets;
      for (auto& t : trainers) t->train_step(empty, nullptr);
    }
    {
      std::lock_guard l(s.metrics_mutex);
      s.metric_sums.clear();
    }
    std::vector<std::future<uint64_t>> fetched;
    for (size_t e = 0; e < 3; ++e)
      fetched.push_back(std::async(std::launch::async, [&, e] { return refit::fetch(*engines[e], *receivers[e], version, 10000); }));
    uint64_t published_bytes = 0;
    for (size_t r = 0; r < 2; ++r) {
      const refit::PublishResult p = refit::publish(*trainers[r], *senders[r], 10000);
      CHECK(p.by_plugin);
      CHECK(p.version == version);
      published_bytes += p.bytes;
    }
    for (auto& f : fetched) CHECK(f.get() == version);
    for (auto& e : engines) CHECK(e->model_info().weight_version == version);

    // Each rank published its rows of w (27 floats) and a replica of norm (9 floats).
    CHECK(published_bytes == 2 * (27 + 9) * 4);
    // The engines' shards came out of the transport's cut: one dense model's bytes in all, nothing
    // handed over whole (no engine holds a tensor as a trainer rank does).
    {
      std::lock_guard l(s.metrics_mutex);
      CHECK(s.metric_sums["transport/receive_bytes_cut"] == (54 + 9) * 4);
      CHECK(s.metric_sums["transport/receive_bytes_handed_over"] == 0);
    }
    int64_t mismatches = 0, checked = 0;
    for (size_t e = 0; e < 3; ++e) {
      const auto w = read_floats(s.dump / std::to_string(e) / "w.bin");
      const auto norm = read_floats(s.dump / std::to_string(e) / "norm.bin");
      REQUIRE(w.size() == 18);
      REQUIRE(norm.size() == 3);
      for (size_t row = 0; row < 6; ++row)
        for (size_t col = 0; col < 3; ++col, ++checked)
          mismatches += !same_bits(w[row * 3 + col], weight_flow_test::weight_value("w", row * 9 + 3 * e + col, version));
      for (size_t i = 0; i < 3; ++i, ++checked) mismatches += !same_bits(norm[i], weight_flow_test::weight_value("norm", 3 * e + i, version));
    }
    CHECK(checked == 54 + 9);
    CHECK(mismatches == 0);
  }
}

TEST_CASE("one whole trainer rank to a column shard, and a receive for another dtype refused naming the tensor") {
  Setup s;
  const auto tc = s.transport->component(MLPT_COMPONENT_TRANSPORT, "inprocess");
  const std::string group = "weight-flow-missing-" + std::to_string(::getpid()), trainer_group = "trainer";
  // A trainer of one rank holds whole tensors.
  const mlpt_component_group g{MLPT_COMPONENT_GROUP_STRUCT_SIZE, {trainer_group.data(), trainer_group.size()}, 0, 1};
  components::Trainer trainer(s.sharded->component(MLPT_COMPONENT_TRAINER, "rows"), nlohmann::json::object(), &g);
  components::Transport sender(tc, nlohmann::json::object(), MLPT_TRANSPORT_SENDER, group);
  components::Engine engine(s.sharded->component(MLPT_COMPONENT_ENGINE, "columns"),
                            nlohmann::json{{"rank", 1}, {"ranks", 3}, {"dump_dir", s.dump.string()}});
  components::Transport receiver(tc, nlohmann::json::object(), MLPT_TRANSPORT_RECEIVER, group);
  refit::publish(trainer, sender, 10000);
  // A whole trainer of one rank: the engine's columns are cut from its tensors.
  CHECK(refit::fetch(engine, receiver, 1, 10000) == 1);
  CHECK(s.metric_sums["transport/receive_bytes_cut"] == (18 + 3) * 4);
  // A receive with another dtype than was published is refused naming the tensor; nothing is held.
  float none = 0;
  int64_t shape[1] = {9};
  mlpt_named_tensor bad{MLPT_NAMED_TENSOR_STRUCT_SIZE, {"norm", 4}, DLTensor{&none, {kDLCPU, 0}, 1, {kDLBfloat, 16, 1}, shape, nullptr, 0}};
  try {
    receiver.receive(1, 1000, {&bad, nullptr, 1});
    FAIL("a receive for a bf16 norm of an fp32 model was accepted");
  } catch (const Error& e) {
    CHECK(e.code() == MLPT_INVALID_ARGUMENT);
    CHECK_THAT(e.what(), Catch::Contains("'norm'") && Catch::Contains("bfloat16"));
  }
  CHECK(engine.model_info().weight_version == 1);
}
