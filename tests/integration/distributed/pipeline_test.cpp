// The trainer's pipeline stages over several micro-batches under mpirun: qwen35_bf16 (qwen35_cuda's
// trainer code, bf16 emulated) runs its loss-gradient pass in the 1F1B order
// (trainer/pipeline_schedule.hpp), each stage's forwards running ahead of its backwards while the
// gradients accumulate in micro-batch order. Five micro-batches (the batch's sequences at 21 tokens
// a micro-batch: 12 | 15 | 9 + 11 | 14 | 10) make every stage go through warm-up, steady state and
// cool-down. The result is the trainer's own step without stages, bit for bit; the order each stage
// ran is read back (MLPT_PIPELINE_TRACE) and held to the 1F1B order written out here.
#include <catch2/catch.hpp>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "trainer_runs.hpp"

using mlpt_test::TempDir;
using nlohmann::json;
using namespace dist_test;

namespace {

constexpr int kMicroBatchTokens = 21;  // five micro-batches of the batch (above)
constexpr int kMicroBatches = 5;

// Every rank's exported shards put back into whole tensors by name. An element that several ranks
// hold (replicas) must come back with the same bits from each.
std::map<std::string, std::vector<float>> whole_weights(const TempDir& dir, int ranks) {
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
      for (int64_t e = 0; e < n; ++e) {
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

// The step of `trainer` on `ranks` ranks with `settings` (MLPT_PIPELINE_TRACE set to `trace` when
// given): its whole weights, and rank 0's metrics.
std::pair<std::map<std::string, std::vector<float>>, json> group_step(const TempDir& dir, int ranks,
                                                                      const json& settings,
                                                                      const std::string& trace = "") {
  struct Environment {  // mpirun's ranks inherit this process's environment
    explicit Environment(const std::string& folder) {
      if (!folder.empty()) setenv("MLPT_PIPELINE_TRACE", folder.c_str(), 1);
    }
    ~Environment() { unsetenv("MLPT_PIPELINE_TRACE"); }
  } environment(trace);
  const Launch run = train_group(dir, ranks, settings, "qwen35_bf16");
  INFO(run.output);
  REQUIRE(run.status == 0);
  return {whole_weights(dir, ranks), rank_report(dir, 0)["metrics"]};
}

// Bit for bit: every element of every tensor; the loss and norm to their last bits but the
// norm's squares, summed stage by stage in another order (1e-12 relative).
void check_same_step(const std::map<std::string, std::vector<float>>& got, const json& got_metrics,
                     const std::map<std::string, std::vector<float>>& want, const json& want_metrics) {
  REQUIRE(got.size() == want.size());
  size_t differing = 0;
  for (const auto& [name, w] : want) {
    INFO(name);
    REQUIRE(got.count(name) == 1);
    REQUIRE(got.at(name).size() == w.size());
    for (size_t i = 0; i < w.size(); ++i) differing += got.at(name)[i] != w[i];
  }
  CHECK(differing == 0);
  for (const char* key : {"loss", "grad_norm"}) {
    INFO(key);
    CHECK(got_metrics[key].get<double>() == Approx(want_metrics[key].get<double>()).epsilon(1e-12));
  }
  for (const char* key : {"tokens", "forward_tokens", "backward_tokens"})
    CHECK(got_metrics[key].get<double>() == want_metrics[key].get<double>());
}

// The steps a rank ran, as its trace file lists them: "stage S of P" and one step a line.
std::vector<std::string> trace_of(const std::string& folder, int rank, std::string& header) {
  std::ifstream in(folder + "/pipeline_rank" + std::to_string(rank) + ".txt");
  REQUIRE(in.good());
  std::getline(in, header);
  std::vector<std::string> steps;
  for (std::string line; std::getline(in, line);) steps.push_back(line);
  return steps;
}

// Counts from a trace: the most micro-batches between forward and backward at once, and whether
// a forward ran while an earlier micro-batch awaited its backward (the stages overlapping).
int peak_in_flight(const std::vector<std::string>& steps) {
  int in_flight = 0, peak = 0;
  for (const std::string& s : steps) {
    if (s.rfind("forward ", 0) == 0) peak = std::max(peak, ++in_flight);
    if (s.rfind("backward ", 0) == 0) --in_flight;
  }
  return peak;
}

}  // namespace

TEST_CASE(
    "pipeline parallel over MPI: qwen35_bf16 as PP=2 and PP=4 over five micro-batches (1F1B) is its one-rank "
    "step bit for bit") {
  const json model = splittable_micro_config();  // four layers: one a stage at PP=4
  for (int pp : {2, 4}) {
    INFO("pp " << pp);
    TempDir dir("dist_pp_1f1b"), trace("dist_pp_trace");
    const json settings = {{"pipeline_parallel", pp}, {"micro_batch_tokens", kMicroBatchTokens}};
    const OneRankStep one = one_rank_step(dir, model, settings);
    const auto [alone_metrics, alone] = one_rank_of(dir, one.settings, "qwen35_bf16");
    const auto [staged, staged_metrics] = group_step(dir, pp, one.settings, trace.str());
    check_same_step(staged, staged_metrics, alone, alone_metrics);
    CHECK(alone_metrics["micro_batches"].get<double>() == kMicroBatches);

    for (int stage = 0; stage < pp; ++stage) {
      INFO("stage " << stage);
      std::string header;
      const std::vector<std::string> steps = trace_of(trace.str(), stage, header);
      CHECK(header == "stage " + std::to_string(stage) + " of " + std::to_string(pp));
      // Each stage holds P - stage micro-batches at most, and that many where five allow: one at
      // a time (the schedule before 1F1B) only on the last.
      CHECK(peak_in_flight(steps) == std::min(pp - stage, kMicroBatches));
      int forwards = 0, backwards = 0;
      for (const std::string& s : steps)
        forwards += s.rfind("forward ", 0) == 0, backwards += s.rfind("backward ", 0) == 0;
      CHECK(forwards == kMicroBatches);
      CHECK(backwards == kMicroBatches);
    }
    if (pp != 2) continue;
    // PP=2 written out: stage 0 warms up with one forward, then sends each forward's output while
    // receiving the gradient of the one before; stage 1 receives the next input while sending
    // each backward's gradient.
    std::string header;
    CHECK(trace_of(trace.str(), 0, header) ==
          std::vector<std::string>{
              "forward 0", "send_forward 0", "forward 1", "send_forward_recv_backward 1 (receives 0)",
              "backward 0", "forward 2", "send_forward_recv_backward 2 (receives 1)", "backward 1",
              "forward 3", "send_forward_recv_backward 3 (receives 2)", "backward 2", "forward 4",
              "send_forward_recv_backward 4 (receives 3)", "backward 3", "recv_backward 4", "backward 4"});
    CHECK(trace_of(trace.str(), 1, header) ==
          std::vector<std::string>{
              "recv_forward 0", "forward 0", "backward 0", "send_backward_recv_forward 0 (receives 1)",
              "forward 1", "backward 1", "send_backward_recv_forward 1 (receives 2)", "forward 2",
              "backward 2", "send_backward_recv_forward 2 (receives 3)", "forward 3", "backward 3",
              "send_backward_recv_forward 3 (receives 4)", "forward 4", "backward 4", "send_backward 4"});
  }
}

// With tensor and expert parallelism in each stage every rank of a stage runs the same 1F1B list,
// so their collectives pair up; the stages cut the layers and nothing else, so the step is the
// same TP=2 x EP=2 group's without stages, bit for bit.
TEST_CASE(
    "pipeline parallel over MPI: qwen35_bf16 as PP=2 x TP=2 x EP=2 over five micro-batches is TP=2 x EP=2's "
    "step bit for bit") {
  TempDir dir("dist_pp_tp_ep_1f1b");
  json settings = {{"tensor_parallel", 2}, {"expert_parallel", 2}, {"micro_batch_tokens", kMicroBatchTokens}};
  const OneRankStep one = one_rank_step(dir, splittable_micro_config(), settings);
  const auto [flat, flat_metrics] = group_step(dir, 4, one.settings);
  json staged_settings = one.settings;
  staged_settings["pipeline_parallel"] = 2;
  const auto [staged, staged_metrics] = group_step(dir, 8, staged_settings);
  check_same_step(staged, staged_metrics, flat, flat_metrics);
}
