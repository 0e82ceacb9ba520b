// What one rank of the device trainer (trainer/device_trainer.cpp) allocates during a training
// step beyond its weights and optimizer state (device_model/rank_memory.hpp): the activations its
// loss-gradient pass keeps and the scratch it computes in, for micro-batches of a given number of
// tokens, from the sizes the code allocates them with.
//
// Counted as the code keeps them:
// - each in-flight micro-batch's layer inputs for recomputation, forward_hidden's (layers + 1) × N
//   × H bf16 of the stage's layers (whole [N, H] rows on every TP rank: no sequence parallelism),
//   and on the last stage its final hidden state [N, H] bf16; a stage holds min(pp − stage, m)
//   micro-batches between forward and backward in the 1F1B order (trainer/pipeline_schedule.hpp);
// - the last stage's LM head: kHeadBlockRows × V_local of fp32 logits and bf16 dlogits, the
//   hidden-state gradient [N, H] bf16 and seven per-token fp32 vectors (targets, weights, old
//   logprobs, logprobs, log-sum-exp, loss, coefficients);
// - the stage-boundary messages, [N, H] fp32 each: input and input gradient after the first stage,
//   output and output gradient before the last (trainer/pipeline_run.hpp).
// - the distributed optimizer's two buffers, when it splits a tensor over replicas: a replica's
//   summed gradient range (the reduce-scatter's receive buffer) and a whole tensor's masters
//   gathered for its working copy, each as large as its largest use. They are asked for after the
//   backward, so the step's peak lies below counted() + scratch_bound + optimizer, not at it.
// Estimated (an upper bound, not the allocator's figure): the workspace the model computes a layer
// in and the expert dispatch's staging, as per-token widths of the shard's layer
// (step_scratch_bytes below); a GPU allocator's fragmentation and the collectives' own buffers
// (NCCL) come on top.
#pragma once

#include <cstdint>
#include <vector>

#include "model/config.hpp"

namespace mlpt::ref::dev {

struct StepMemory {
  int64_t in_flight = 0;     // micro-batches held between forward and backward at once
  double kept_inputs = 0;    // their layer inputs (and, on the last stage, final hidden states)
  double head = 0;           // the LM head's block, input gradient and per-token vectors
  double messages = 0;       // the stage-boundary buffers
  double scratch_bound = 0;  // the workspace and expert-dispatch staging, bounded from above
  double optimizer = 0;      // the distributed optimizer's range and gather buffers
  double counted() const { return kept_inputs + head + messages; }  // live at once in the backward
  double total() const { return counted() + scratch_bound + optimizer; }
};

// The micro-batches a 1F1B stage holds between forward and backward at once: min(pp − stage, m).
int64_t in_flight_micro_batches(int pp, int stage, int64_t micro_batches);

// The workspace scratch of `tokens` tokens through one layer of shard config `c`, plus the expert
// dispatch's staging: an upper bound (the backward's reused buffers at their widest use, every
// other per-token width at 4 bytes; on the micro models 1.6 to 2.3 times what the code allocates).
double step_scratch_bytes(const ModelConfig& c, int64_t tokens);

// Rank `shard` (of model `full`) training micro-batches of tokens[j] tokens, in order: the kept
// inputs of the heaviest min(pp − stage, m) consecutive ones (the 1F1B window), the rest sized by
// the largest; the optimizer's buffers for `data_parallel` replicas (rank_memory.hpp's
// optimizer_replicas). Throws as shard_config does for a layout the code refuses.
StepMemory step_memory(const ModelConfig& full, const ModelShard& shard, const std::vector<int64_t>& tokens,
                       int data_parallel = 1, bool moe_parallel_folding = false);

// The busiest rank of a tp × ep × pp layout (experts whole, etp 1 or tp), by rank_memory_of's
// trainer total (with `moe_parallel_folding` as the trainer runs) plus this step's total; its shard
// in `busiest`.
StepMemory busiest_step_memory(const ModelConfig& full, int tp, int ep, int etp, int pp, int data_parallel,
                               int64_t tokens, int64_t micro_batches, bool moe_parallel_folding,
                               ModelShard* busiest = nullptr);

}  // namespace mlpt::ref::dev
