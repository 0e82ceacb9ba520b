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

#include "trainer_runs.hpp"

using nlohmann::json;
using mlpt_test::TempDir;
using namespace dist_test;

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
    // The clip norm's sum in a fixed order: every rank of the group gets the very same bits.
    CHECK(r["metrics"]["grad_norm"].get<double>() == rank_report(dir, 0)["metrics"]["grad_norm"].get<double>());
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
