// The trainers' pipeline stages over several micro-batches under mpirun: qwen35_bf16 (qwen35_cuda's
// trainer code, bf16 emulated) and qwen35_cpu (the fp32 reference) run their loss-gradient pass in
// the 1F1B order (trainer/pipeline_schedule.hpp, executed by trainer/pipeline_run.hpp for both),
// each stage's forwards running ahead of its backwards while the gradients accumulate in
// micro-batch order. Five micro-batches (the batch's sequences at 21 tokens a micro-batch: 12 | 15
// | 9 + 11 | 14 | 10) make every stage go through warm-up, steady state and cool-down. The result is
// the trainer's own step without stages, bit for bit; the order each stage ran is read back
// (MLPT_PIPELINE_TRACE) and held to the 1F1B order written out here.
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "pipeline_runs.hpp"

using mlpt_test::TempDir;
using nlohmann::json;
using namespace dist_test;

// Bit for bit: every weight; the loss and norm but for the norm's squares, which the stages sum
// in another order (1e-12 relative).
constexpr double kSameBits = 0, kNormOrder = 1e-12;

TEST_CASE(
    "pipeline parallel over MPI: qwen35_bf16 and qwen35_cpu as PP=2 and PP=4 over five micro-batches (1F1B) "
    "are their one-rank steps bit for bit") {
  const json model = splittable_micro_config();  // four layers: one a stage at PP=4
  for (const std::string trainer : {"qwen35_bf16", "qwen35_cpu"})
    for (int pp : {2, 4}) {
      INFO(trainer << ", pp " << pp);
      TempDir dir("dist_pp_1f1b"), trace("dist_pp_trace");
      const json settings = {{"pipeline_parallel", pp}, {"micro_batch_tokens", kPipelineMicroBatchTokens}};
      const OneRankStep one = one_rank_step(dir, model, settings);
      const auto [alone_metrics, alone] = one_rank_of(dir, one.settings, trainer);
      CHECK(alone_metrics["micro_batches"].get<double>() == kPipelineMicroBatches);
      const auto [staged, staged_metrics] = group_step(dir, pp, one.settings, trainer, trace.str());
      check_same_step(staged, staged_metrics, alone, alone_metrics, kSameBits, kNormOrder);
      check_one_forward_one_backward(trace.str(), pp, kPipelineMicroBatches);
      if (pp != 2) continue;
      // PP=2 written out: stage 0 warms up with one forward, then sends each forward's output while
      // it receives the gradient of the one before; stage 1 receives the next input while it sends
      // each backward's gradient.
      std::string header;
      CHECK(pipeline_trace(trace.str(), 0, header) ==
            std::vector<std::string>{
                "forward 0", "send_forward 0", "forward 1", "send_forward_recv_backward 1 (receives 0)",
                "backward 0", "forward 2", "send_forward_recv_backward 2 (receives 1)", "backward 1",
                "forward 3", "send_forward_recv_backward 3 (receives 2)", "backward 2", "forward 4",
                "send_forward_recv_backward 4 (receives 3)", "backward 3", "recv_backward 4", "backward 4"});
      CHECK(pipeline_trace(trace.str(), 1, header) ==
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
    "pipeline parallel over MPI: qwen35_bf16 and qwen35_cpu as PP=2 x TP=2 x EP=2 over five micro-batches "
    "are "
    "TP=2 x EP=2's steps bit for bit") {
  for (const std::string trainer : {"qwen35_bf16", "qwen35_cpu"}) {
    INFO(trainer);
    TempDir dir("dist_pp_tp_ep_1f1b"), trace("dist_pp_tp_ep_trace");
    const json settings = {
        {"tensor_parallel", 2}, {"expert_parallel", 2}, {"micro_batch_tokens", kPipelineMicroBatchTokens}};
    const OneRankStep one = one_rank_step(dir, splittable_micro_config(), settings);
    const auto [flat, flat_metrics] = group_step(dir, 4, one.settings, trainer);
    json staged_settings = one.settings;
    staged_settings["pipeline_parallel"] = 2;
    const auto [staged, staged_metrics] = group_step(dir, 8, staged_settings, trainer, trace.str());
    check_same_step(staged, staged_metrics, flat, flat_metrics, kSameBits, kNormOrder);
    check_one_forward_one_backward(trace.str(), 2, kPipelineMicroBatches, /*ranks_per_stage=*/4);
  }
}
