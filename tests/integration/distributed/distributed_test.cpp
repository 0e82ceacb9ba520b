// Runs across real processes started by Open MPI's mpirun on this machine: the MPI key-value store
// and barrier (core/dist/mpi/rendezvous.hpp) and the reference trainer's data parallelism (two
// trainer ranks equal one). dist_peer.cpp is the program each rank runs.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "core/components/instances.hpp"
#include "core/plugin/host_services.hpp"
#include "core/plugin/plugin.hpp"
#include "mpirun.hpp"
#include "model_fixtures.hpp"
#include "test_util.hpp"

using nlohmann::json;
using mlpt_test::TempDir;

namespace {

json rank_report(const TempDir& dir, int rank) {
  std::ifstream in(dir / ("rank" + std::to_string(rank) + ".json"));
  REQUIRE(in.good());
  return json::parse(in);
}

std::vector<float> read_floats(const std::string& path) {
  std::string bytes = mlpt_test::read_bytes(path);
  std::vector<float> v(bytes.size() / sizeof(float));
  std::memcpy(v.data(), bytes.data(), v.size() * sizeof(float));
  return v;
}

}  // namespace

TEST_CASE("MPI rendezvous: every rank puts, gets and meets at barriers, and timeouts and cancellation name the key") {
  TempDir dir("dist_rdv");
  auto run = dist_test::mpirun(3, std::string(DIST_PEER_EXE) + " rendezvous " + dir.str());
  INFO(run.output);
  REQUIRE(run.status == 0);
  for (int rank = 0; rank < 3; ++rank) {
    json r = rank_report(dir, rank);
    INFO(r.dump(2));
    CHECK(r["rank"] == rank);
    CHECK(r["world_size"] == 3);
    CHECK(r["local_size"] == 3);  // one machine: one node
    CHECK(r["num_nodes"] == 1);
    CHECK(r["node_index"] == 0);
    CHECK(r["local_rank"] == rank);
    for (int k = 0; k < 3; ++k) CHECK(r["seen"][k] == "hello from " + std::to_string((rank + k) % 3));
    CHECK(r["second_put"]["code"] == MLPT_ALREADY_EXISTS);
    CHECK(r["missing"]["code"] == MLPT_DEADLINE_EXCEEDED);
    CHECK_THAT(r["missing"]["message"].get<std::string>(), Catch::Contains("never/put") && Catch::Contains("300 ms"));
    CHECK(r["cancelled"]["code"] == MLPT_CANCELLED);
    if (rank == 0) {
      CHECK(r["lonely_barrier"]["code"] == MLPT_DEADLINE_EXCEEDED);
      CHECK_THAT(r["lonely_barrier"]["message"].get<std::string>(), Catch::Contains("rank0-alone"));
    }
  }
}

TEST_CASE("data parallel over MPI: two trainer ranks' step equals the one-rank trainer's (loss, metrics, weights)") {
  TempDir dir("dist_dp");
  // A micro checkpoint from the model tool, and a fixed batch of six sequences whose generation
  // logprobs are the trainer's own (on-policy), so nothing is masked.
  const std::string config = dir / "ck.config.json", ck = dir / "ck";
  mlpt_test::write_bytes(config, mlpt_test::micro_config_json().dump());
  int status = 0;
  std::string log = mlpt_test::run_command(std::string(MLPT_BUILD_DIR) + "/bin/mlpt-model init --config " + config +
                                               " --seed 31 --out " + ck + " 2>&1", &status);
  INFO(log);
  REQUIRE(status == 0);
  // lr 1, eps 1, betas 0 and no clipping make the update g / (|g| + 1): the weights show the
  // gradient's size, not only its sign (AdamW's usual first step), so a rank that missed the
  // other's gradient cannot agree by accident.
  const json settings = {{"checkpoint", ck},
                         {"optimizer", {{"lr", 1.0}, {"eps", 1.0}, {"betas", {0.0, 0.0}}, {"grad_clip", 0}}}};
  mlpt::plugin::HostServices host;
  auto plugin = mlpt::plugin::Plugin::load(std::string(MLPT_PLUGIN_DIR) + "/libmlpt_reference.so", host);
  mlpt::components::Trainer one(plugin->component(MLPT_COMPONENT_TRAINER, "qwen35_cpu"), settings);

  std::vector<int64_t> offsets{0};
  std::vector<int32_t> tokens;
  std::vector<uint8_t> loss_mask, truncated;
  std::vector<float> advantages;
  const int lengths[] = {12, 15, 9, 11, 14, 10}, prompts[] = {4, 5, 3, 6, 4, 5};
  for (int s = 0; s < 6; ++s) {
    for (int i = 0; i < lengths[s]; ++i) {
      tokens.push_back((s + 1 + 7 * i) % 37);
      loss_mask.push_back(i >= prompts[s]);
    }
    offsets.push_back(static_cast<int64_t>(tokens.size()));
    advantages.push_back(s % 2 ? -1.0f : 1.0f + 0.25f * s);
    truncated.push_back(0);
  }
  mlpt_train_batch batch{};
  batch.struct_size = MLPT_TRAIN_BATCH_STRUCT_SIZE;
  batch.num_sequences = advantages.size();
  batch.offsets = offsets.data(), batch.tokens = tokens.data(), batch.loss_mask = loss_mask.data();
  batch.advantages = advantages.data(), batch.truncated = truncated.data();
  std::vector<float> logprobs = one.compute_logprobs(batch);
  for (size_t i = 0; i < logprobs.size(); ++i) logprobs[i] = loss_mask[i] ? logprobs[i] : 0.0f;
  batch.generation_logprobs = logprobs.data();
  const json batch_json = {{"offsets", offsets}, {"tokens", tokens}, {"loss_mask", loss_mask}, {"truncated", truncated},
                           {"generation_logprobs", logprobs}, {"advantages", advantages}};
  mlpt_test::write_bytes(dir / "batch.json", batch_json.dump());

  uint64_t version = 0;
  std::map<std::string, double> expected;
  for (const auto& m : one.train_step(batch, &version)) expected[m.name] = m.value;
  std::vector<float> one_weights;
  auto w = one.export_weights();
  for (size_t i = 0; i < w.count; ++i) {
    const DLTensor& t = w.tensors[i].tensor;
    int64_t n = 1;
    for (int k = 0; k < t.ndim; ++k) n *= t.shape[k];
    const float* data = static_cast<const float*>(t.data);
    one_weights.insert(one_weights.end(), data, data + n);
  }

  auto run = dist_test::mpirun(2, std::string(DIST_PEER_EXE) + " trainer " + MLPT_PLUGIN_DIR + "/libmlpt_reference.so " +
                                      dir / "batch.json" + " '" + settings.dump() + "' " + dir.str());
  INFO(run.output);
  REQUIRE(run.status == 0);
  json r0 = rank_report(dir, 0), r1 = rank_report(dir, 1);
  INFO(r0.dump(2) << "\n" << r1.dump(2));
  // Each rank trained its own share: together, the whole batch.
  CHECK(r0["sequences"].get<int>() + r1["sequences"].get<int>() == 6);
  CHECK(r0["sequences"].get<int>() > 0);
  CHECK(r1["sequences"].get<int>() > 0);
  CHECK(r0["version"] == version);
  // The stated tolerance: the summed gradient differs from one rank's only by float summation
  // order, so the loss and the gradient norm agree to 1e-6 relative and every weight to 1e-6
  // absolute (weights and steps are O(0.1); fp32 holds them to about 1e-8).
  for (const char* key : {"loss", "grad_norm", "tokens", "sequences"}) {
    INFO(key);
    CHECK(r0["metrics"][key].get<double>() == Approx(expected[key]).epsilon(1e-6));
    CHECK(r1["metrics"][key].get<double>() == Approx(expected[key]).epsilon(1e-6));
  }
  CHECK(std::fabs(expected["loss"]) > 1e-6);  // a step that moved
  auto w0 = read_floats(dir / "rank0.weights"), w1 = read_floats(dir / "rank1.weights");
  REQUIRE(w0.size() == one_weights.size());
  REQUIRE(w1.size() == one_weights.size());
  double worst = 0, moved = 0;
  size_t ranks_differ = 0;
  for (size_t i = 0; i < one_weights.size(); ++i) {
    worst = std::max({worst, std::fabs(double(w0[i]) - one_weights[i]), std::fabs(double(w1[i]) - one_weights[i])});
    ranks_differ += w0[i] != w1[i];
  }
  CHECK(ranks_differ == 0);  // the ranks hold the very same weights
  // How far the step moved the weights, for scale: a rank that missed the other's gradient would
  // be off by about this much.
  mlpt::components::Trainer fresh(plugin->component(MLPT_COMPONENT_TRAINER, "qwen35_cpu"), settings);
  auto f = fresh.export_weights();
  size_t at = 0;
  for (size_t i = 0; i < f.count; ++i) {
    const DLTensor& t = f.tensors[i].tensor;
    int64_t n = 1;
    for (int k = 0; k < t.ndim; ++k) n *= t.shape[k];
    for (int64_t j = 0; j < n; ++j, ++at) moved = std::max(moved, std::fabs(double(static_cast<const float*>(t.data)[j]) - one_weights[at]));
  }
  INFO("worst weight difference " << worst << ", largest move of the step " << moved);
  CHECK(moved > 1e-3);
  CHECK(worst < 1e-6);
}
