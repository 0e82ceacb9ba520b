// What the pipeline-stage trainer tests share (pipeline_test.cpp on the CPU, the GPU tests'
// parallel_trainer_test.cpp): a group's step with its shards put back into whole tensors, the
// comparison of two steps, and the order each stage ran its loss-gradient pass, read from the
// files the trainer writes where MLPT_PIPELINE_TRACE points (trainer/pipeline_run.hpp).
#pragma once

#include <cstdlib>
#include <fstream>
#include <limits>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "trainer_runs.hpp"

namespace dist_test {

// The batch of one_rank_step at 21 tokens a micro-batch: 12 | 15 | 9 + 11 | 14 | 10, five
// micro-batches, so every stage of up to five goes through warm-up, steady state and cool-down.
constexpr int kPipelineMicroBatchTokens = 21;
constexpr int kPipelineMicroBatches = 5;

// Every rank's exported shards put back into whole tensors by name. An element that several ranks
// hold (replicas) must come back with the same bits from each.
inline std::map<std::string, std::vector<float>> whole_weights(const TempDir& dir, int ranks) {
  std::map<std::string, std::vector<float>> whole;
  for (int rank = 0; rank < ranks; ++rank) {
    const json r = rank_report(dir, rank);
    INFO("rank " << rank << ": " << r.dump());
    REQUIRE_FALSE(r.contains("error"));
    const std::vector<float> data = read_floats(dir / ("rank" + std::to_string(rank) + ".weights"));
    size_t at = 0;
    for (const json& t : r["tensors"]) {
      const auto shape = t["shape"].get<std::vector<int64_t>>(),
                 global = t["global_shape"].get<std::vector<int64_t>>();
      const auto offsets = t["offsets"].get<std::vector<int64_t>>();
      int64_t n = 1, total = 1;
      for (size_t d = 0; d < shape.size(); ++d) n *= shape[d], total *= global[d];
      std::vector<float>& w = whole[t["name"].get<std::string>()];
      if (w.empty()) w.assign(size_t(total), std::numeric_limits<float>::quiet_NaN());
      REQUIRE(at + size_t(n) <= data.size());
      for (int64_t e = 0; e < n; ++e) {  // element e of the box: its index in the whole tensor
        int64_t rest = e, index = 0, stride = 1;
        for (size_t d = shape.size(); d-- > 0;) {
          index += (offsets[d] + rest % shape[d]) * stride;
          rest /= shape[d], stride *= global[d];
        }
        float& slot = w[size_t(index)];
        if (slot == slot) CHECK(slot == data[at + size_t(e)]);  // a replica: the same bits
        slot = data[at + size_t(e)];
      }
      at += size_t(n);
    }
  }
  return whole;
}

// One step of `trainer` on `ranks` ranks with `settings`, MLPT_PIPELINE_TRACE set to `trace` when
// given: its whole weights and rank 0's metrics.
inline std::pair<std::map<std::string, std::vector<float>>, json> group_step(const TempDir& dir, int ranks,
                                                                             const json& settings,
                                                                             const std::string& trainer,
                                                                             const std::string& trace = "") {
  struct Environment {  // mpirun's ranks inherit this process's environment
    explicit Environment(const std::string& folder) {
      if (!folder.empty()) setenv("MLPT_PIPELINE_TRACE", folder.c_str(), 1);
    }
    ~Environment() { unsetenv("MLPT_PIPELINE_TRACE"); }
  } environment(trace);
  const Launch run = train_group(dir, ranks, settings, trainer);
  INFO(run.output);
  REQUIRE(run.status == 0);
  return {whole_weights(dir, ranks), rank_report(dir, 0)["metrics"]};
}

// `got` against `want`: every weight within `weight_tolerance` (0: the same bits), the loss and
// norm within `metric_tolerance` relative, the token counts equal.
inline void check_same_step(const std::map<std::string, std::vector<float>>& got, const json& got_metrics,
                            const std::map<std::string, std::vector<float>>& want, const json& want_metrics,
                            double weight_tolerance, double metric_tolerance) {
  REQUIRE(got.size() == want.size());
  size_t differing = 0;
  double worst = 0;
  for (const auto& [name, w] : want) {
    INFO(name);
    REQUIRE(got.count(name) == 1);
    REQUIRE(got.at(name).size() == w.size());
    for (size_t i = 0; i < w.size(); ++i) {
      differing += got.at(name)[i] != w[i];
      worst = std::max(worst, std::fabs(double(got.at(name)[i]) - w[i]));
    }
  }
  WARN(differing << " weights differ, by up to " << worst);
  if (weight_tolerance == 0) CHECK(differing == 0);
  CHECK(worst <= weight_tolerance);
  for (const char* key : {"loss", "grad_norm"}) {
    INFO(key);
    CHECK(got_metrics[key].get<double>() ==
          Approx(want_metrics[key].get<double>()).epsilon(metric_tolerance));
  }
  for (const char* key : {"tokens", "forward_tokens", "backward_tokens"})
    CHECK(got_metrics[key].get<double>() == want_metrics[key].get<double>());
}

// The steps group rank `rank` ran, as its trace file lists them ("stage S of P" in `header`).
inline std::vector<std::string> pipeline_trace(const std::string& folder, int rank, std::string& header) {
  std::ifstream in(folder + "/pipeline_rank" + std::to_string(rank) + ".txt");
  REQUIRE(in.good());
  std::getline(in, header);
  std::vector<std::string> steps;
  for (std::string line; std::getline(in, line);) steps.push_back(line);
  return steps;
}

// The 1F1B shape of every stage's trace (group ranks 0 .. pp · ranks_per_stage - 1, a stage's
// ranks neighbours): each micro-batch's forward and backward once, in micro-batch order, and stage
// s holding min(P - s, m) micro-batches between forward and backward at its peak (one at a time,
// the schedule before 1F1B, only on the last stage).
inline void check_one_forward_one_backward(const std::string& folder, int pp, int micro_batches,
                                           int ranks_per_stage = 1) {
  for (int rank = 0; rank < pp * ranks_per_stage; ++rank) {
    const int stage = rank / ranks_per_stage;
    INFO("rank " << rank << ", stage " << stage);
    std::string header;
    const std::vector<std::string> steps = pipeline_trace(folder, rank, header);
    CHECK(header == "stage " + std::to_string(stage) + " of " + std::to_string(pp));
    int in_flight = 0, peak = 0, forwards = 0, backwards = 0;
    for (const std::string& s : steps) {
      if (s.rfind("forward ", 0) == 0) {
        CHECK(s == "forward " + std::to_string(forwards++));
        peak = std::max(peak, ++in_flight);
      }
      if (s.rfind("backward ", 0) == 0) {
        CHECK(s == "backward " + std::to_string(backwards++));
        --in_flight;
      }
    }
    CHECK(forwards == micro_batches);
    CHECK(backwards == micro_batches);
    CHECK(peak == std::min(pp - stage, micro_batches));
  }
}

}  // namespace dist_test
