// Runs across real processes started by Open MPI's mpirun on this machine: the MPI key-value store
// and barrier (core/dist/mpi/rendezvous.hpp) and the reference trainer's data parallelism (two
// trainer ranks equal one) and model parallelism (TP=2, EP=2, TP×EP and TP×DP ranks equal one,
// their exported shards put back in place). dist_peer.cpp is the program each rank runs.
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

namespace {

// One step of the one-rank trainer on a fixed batch of six sequences, and what the group runs need
// to repeat it: the checkpoint, the batch as JSON (dir/batch.json), the settings.
struct OneRankStep {
  json settings;
  std::map<std::string, double> metrics;
  uint64_t version = 0;
  std::vector<std::string> names;                       // in export order
  std::map<std::string, std::vector<float>> weights;    // after the step
  std::vector<float> flat;                              // the same, concatenated in export order
  double moved = 0;                                     // the largest change of a weight in the step
};

std::vector<float> exported_flat(const mlpt::components::Trainer::Weights& w, std::vector<std::string>* names = nullptr,
                                 std::map<std::string, std::vector<float>>* by_name = nullptr) {
  std::vector<float> flat;
  for (size_t i = 0; i < w.count; ++i) {
    const DLTensor& t = w.tensors[i].tensor;
    int64_t n = 1;
    for (int k = 0; k < t.ndim; ++k) n *= t.shape[k];
    const float* data = static_cast<const float*>(t.data);
    flat.insert(flat.end(), data, data + n);
    const std::string name(w.tensors[i].name.data, w.tensors[i].name.size);
    if (names) names->push_back(name);
    if (by_name) (*by_name)[name].assign(data, data + n);
  }
  return flat;
}

// A micro checkpoint of `model_config` from the model tool, and a batch whose generation logprobs
// are the trainer's own (on-policy), so nothing is masked.
OneRankStep one_rank_step(const TempDir& dir, const json& model_config, json extra_settings = json::object()) {
  const std::string config = dir / "ck.config.json", ck = dir / "ck";
  mlpt_test::write_bytes(config, model_config.dump());
  int status = 0;
  std::string log = mlpt_test::run_command(std::string(MLPT_BUILD_DIR) + "/bin/mlpt-model init --config " + config +
                                               " --seed 31 --out " + ck + " 2>&1", &status);
  INFO(log);
  REQUIRE(status == 0);
  OneRankStep r;
  // lr 1, eps 1, betas 0 and no clipping make the update g / (|g| + 1): the weights show the
  // gradient's size, not only its sign (AdamW's usual first step), so a rank that missed the
  // other's gradient cannot agree by accident.
  r.settings = {{"checkpoint", ck}, {"optimizer", {{"lr", 1.0}, {"eps", 1.0}, {"betas", {0.0, 0.0}}, {"grad_clip", 0}}}};
  mlpt::plugin::HostServices host;
  auto plugin = mlpt::plugin::Plugin::load(std::string(MLPT_PLUGIN_DIR) + "/libmlpt_reference.so", host);
  mlpt::components::Trainer one(plugin->component(MLPT_COMPONENT_TRAINER, "qwen35_cpu"), r.settings);
  r.settings.update(extra_settings);  // for the group's ranks only

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

  for (const auto& m : one.train_step(batch, &r.version)) r.metrics[m.name] = m.value;
  r.flat = exported_flat(one.export_weights(), &r.names, &r.weights);
  // How far the step moved the weights, for scale: a rank that missed the other's gradient would
  // be off by about this much.
  mlpt::components::Trainer fresh(plugin->component(MLPT_COMPONENT_TRAINER, "qwen35_cpu"), json{{"checkpoint", ck}});
  const std::vector<float> before = exported_flat(fresh.export_weights());
  for (size_t i = 0; i < before.size(); ++i) r.moved = std::max(r.moved, std::fabs(double(before[i]) - r.flat[i]));
  return r;
}

dist_test::Launch train_group(const TempDir& dir, int ranks, const json& settings) {
  return dist_test::mpirun(ranks, std::string(DIST_PEER_EXE) + " trainer " + MLPT_PLUGIN_DIR + "/libmlpt_reference.so " +
                                      dir / "batch.json" + " '" + settings.dump() + "' " + dir.str());
}

}  // namespace

TEST_CASE("data parallel over MPI: two trainer ranks' step equals the one-rank trainer's (loss, metrics, weights)") {
  TempDir dir("dist_dp");
  const OneRankStep one = one_rank_step(dir, mlpt_test::micro_config_json());
  auto run = train_group(dir, 2, one.settings);
  INFO(run.output);
  REQUIRE(run.status == 0);
  json r0 = rank_report(dir, 0), r1 = rank_report(dir, 1);
  INFO(r0.dump(2) << "\n" << r1.dump(2));
  // Each rank trained its own share: together, the whole batch.
  CHECK(r0["sequences"].get<int>() + r1["sequences"].get<int>() == 6);
  CHECK(r0["sequences"].get<int>() > 0);
  CHECK(r1["sequences"].get<int>() > 0);
  CHECK(r0["version"] == one.version);
  // The stated tolerance: the summed gradient differs from one rank's only by float summation
  // order, so the loss and the gradient norm agree to 1e-6 relative and every weight to 1e-6
  // absolute (weights and steps are O(0.1); fp32 holds them to about 1e-8).
  for (const char* key : {"loss", "grad_norm", "tokens", "sequences"}) {
    INFO(key);
    CHECK(r0["metrics"][key].get<double>() == Approx(one.metrics.at(key)).epsilon(1e-6));
    CHECK(r1["metrics"][key].get<double>() == Approx(one.metrics.at(key)).epsilon(1e-6));
  }
  CHECK(std::fabs(one.metrics.at("loss")) > 1e-6);  // a step that moved
  auto w0 = read_floats(dir / "rank0.weights"), w1 = read_floats(dir / "rank1.weights");
  REQUIRE(w0.size() == one.flat.size());
  REQUIRE(w1.size() == one.flat.size());
  double worst = 0;
  size_t ranks_differ = 0;
  for (size_t i = 0; i < one.flat.size(); ++i) {
    worst = std::max({worst, std::fabs(double(w0[i]) - one.flat[i]), std::fabs(double(w1[i]) - one.flat[i])});
    ranks_differ += w0[i] != w1[i];
  }
  CHECK(ranks_differ == 0);  // the ranks hold the very same weights
  INFO("worst weight difference " << worst << ", largest move of the step " << one.moved);
  CHECK(one.moved > 1e-3);
  CHECK(worst < 1e-6);
}

namespace {

// The micro model with heads that split over two tensor-parallel ranks (two KV heads, two GDN key
// heads); its four experts split over two or four expert-parallel ranks.
json splittable_micro_config() {
  json c = mlpt_test::micro_config_json();
  c["text_config"]["num_key_value_heads"] = 2;
  c["text_config"]["linear_num_key_heads"] = 2;
  return c;
}

// Runs one step on `ranks` ranks of tensor_parallel tp × expert_parallel ep (and data parallelism
// over what is left), puts every rank's exported shards back in place and compares them with the
// one-rank step's weights: the loss and gradient norm within metric_tolerance relative, every
// weight within weight_tolerance absolute (the weights and the step are O(0.1)).
void check_model_parallel_step(int ranks, int tp, int ep, double metric_tolerance, double weight_tolerance) {
  TempDir dir("dist_mp");
  const OneRankStep one =
      one_rank_step(dir, splittable_micro_config(), {{"tensor_parallel", tp}, {"expert_parallel", ep}});
  auto run = train_group(dir, ranks, one.settings);
  INFO(run.output);
  REQUIRE(run.status == 0);
  std::map<std::string, std::vector<int>> covered;  // how many ranks hold each element
  for (const auto& [name, w] : one.weights) covered[name].assign(w.size(), 0);
  double worst_weight = 0, worst_metric = 0;
  int sequences = 0;  // over one rank of each model-parallel group: the whole batch
  for (int rank = 0; rank < ranks; ++rank) {
    json r = rank_report(dir, rank);
    INFO("rank " << rank << ": " << r.dump(2));
    REQUIRE_FALSE(r.contains("error"));
    CHECK(r["version"] == one.version);
    if (rank % (tp * ep) == 0) sequences += r["sequences"].get<int>();
    CHECK(r["sequences"] == rank_report(dir, rank - rank % (tp * ep))["sequences"]);  // one share per group
    for (const char* key : {"loss", "grad_norm"}) {
      INFO(key);
      const double want = one.metrics.at(key), got = r["metrics"][key].get<double>();
      worst_metric = std::max(worst_metric, std::fabs(got - want) / std::fabs(want));
      CHECK(got == Approx(want).epsilon(metric_tolerance));
    }
    for (const char* key : {"tokens", "sequences", "forward_tokens", "backward_tokens"}) {
      INFO(key);
      CHECK(r["metrics"][key].get<double>() == one.metrics.at(key));
    }
    // The rank's shards, each a box of its global tensor.
    const std::vector<float> data = read_floats(dir / ("rank" + std::to_string(rank) + ".weights"));
    size_t at = 0;
    for (const json& t : r["tensors"]) {
      const std::string name = t["name"];
      INFO(name);
      REQUIRE(one.weights.count(name) == 1);
      const auto shape = t["shape"].get<std::vector<int64_t>>(), global = t["global_shape"].get<std::vector<int64_t>>();
      const auto offsets = t["offsets"].get<std::vector<int64_t>>();
      int64_t n = 1, whole = 1;
      for (size_t d = 0; d < shape.size(); ++d) n *= shape[d], whole *= global[d];
      REQUIRE(whole == static_cast<int64_t>(one.weights.at(name).size()));
      REQUIRE(at + static_cast<size_t>(n) <= data.size());
      for (int64_t e = 0; e < n; ++e) {  // element e of the box → its index in the global tensor
        int64_t rest = e, index = 0, stride = 1;
        std::vector<int64_t> place(shape.size());
        for (size_t d = shape.size(); d-- > 0;) place[d] = offsets[d] + rest % shape[d], rest /= shape[d];
        for (size_t d = shape.size(); d-- > 0;) index += place[d] * stride, stride *= global[d];
        worst_weight = std::max(worst_weight, std::fabs(double(data[at + e]) - one.weights.at(name)[index]));
        ++covered[name][index];
      }
      at += static_cast<size_t>(n);
    }
    CHECK(at == data.size());
  }
  CHECK(sequences == 6);
  // Together the ranks hold every element of every tensor (replicas more than once).
  for (const auto& [name, counts] : covered) {
    INFO(name);
    CHECK(*std::min_element(counts.begin(), counts.end()) >= 1);
  }
  WARN("tp " << tp << " ep " << ep << " on " << ranks << " ranks: loss and grad_norm within " << worst_metric
             << " relative, weights within " << worst_weight << " of the one-rank step (which moved them up to " << one.moved << ")");
  CHECK(one.moved > 1e-3);
  CHECK(worst_weight <= weight_tolerance);
}

}  // namespace

// The stated tolerances (measured on the micro model: TP=2 loss and gradient norm within 1.3e-8
// relative, weights within 3.7e-8; EP=2 weights bit for bit, the norm within 1e-15 from its
// summation order). EP moves whole tokens to whole experts and sums each token's experts in the
// one-rank order, so it is exact; TP sums partial products of split matrices, so its float
// rounding differs from one rank's.
TEST_CASE("model parallel over MPI: a TP=2 trainer group's step equals the one-rank trainer's (metrics, reassembled weights)") {
  check_model_parallel_step(2, 2, 1, 1e-6, 1e-6);
}

TEST_CASE("model parallel over MPI: an EP=2 trainer group's step equals the one-rank trainer's bit for bit (weights)") {
  check_model_parallel_step(2, 1, 2, 1e-12, 0.0);
}

TEST_CASE("model parallel over MPI: TP=2 x EP=2 on four ranks, and TP=2 x data parallel 2, equal the one-rank trainer") {
  check_model_parallel_step(4, 2, 2, 1e-6, 1e-6);
  check_model_parallel_step(4, 2, 1, 1e-6, 1e-6);
}

TEST_CASE("model parallel over MPI: ranks of one TP=2 group given different batch shares refuse the step, each naming why") {
  TempDir dir("dist_mp_share");
  const OneRankStep one = one_rank_step(dir, splittable_micro_config(), {{"tensor_parallel", 2}, {"expert_parallel", 1}});
  auto run = dist_test::mpirun(2, "env MLPT_TEST_SHARE_PER_RANK=1 " + std::string(DIST_PEER_EXE) + " trainer " + MLPT_PLUGIN_DIR +
                                      "/libmlpt_reference.so " + dir / "batch.json" + " '" + one.settings.dump() + "' " + dir.str());
  INFO(run.output);
  CHECK(run.status != 0);  // and it ended: mpirun's timeout is far away
  for (int rank = 0; rank < 2; ++rank) {
    const json r = rank_report(dir, rank);
    INFO("rank " << rank << ": " << r.dump(2));
    REQUIRE(r.contains("error"));
    const std::string error = r["error"];
    CHECK_THAT(error, Catch::Contains("trainer group rank " + std::to_string(rank) + ": the ranks of its model-parallel group") &&
                          Catch::Contains("different batch shares"));
  }
}
