// The order in which a pipeline stage runs the loss-gradient pass of a training step: one forward
// then one backward (1F1B), so every stage works while the others do. Stage s of P first runs
// min(P - s - 1, m) forwards (warm-up: the later stages have nothing to do yet), then alternates
// forward and backward (steady state), then runs the backwards left (cool-down). Backwards run in
// micro-batch order 0, 1, 2, ... on every stage, as forwards do, so a stage accumulates its
// gradients in the order the one-micro-batch-at-a-time schedule did: the same bits. A stage holds
// the activations (stage inputs, for recomputation) of at most P - s micro-batches at once.
//
// The steps name the point-to-point messages at the stage boundaries too. In the steady state a
// stage sends a forward's output to the next stage while it receives a backward's gradient from
// it, and sends a backward's gradient to the previous stage while it receives the next forward's
// input from it: each such pair is one send_recv (model/parallel/communicator.hpp), so two
// neighbours that both send never wait for each other. Pure: no communication, no model.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace mlpt::ref {

enum class PipelineAction {
  recv_forward,                // receive micro_batch's stage input from the previous stage
  forward,                     // micro_batch's forward through this stage's layers (inputs kept)
  send_forward,                // send its stage output to the next stage
  recv_backward,               // receive d(micro_batch's stage output) from the next stage
  backward,                    // micro_batch's backward (recomputing its layers), inputs freed
  send_backward,               // send d(its stage input) to the previous stage
  send_forward_recv_backward,  // send micro_batch's output to the next stage, receive d(received's output)
  send_backward_recv_forward,  // send d(micro_batch's input) to the previous stage, receive received's input
};

struct PipelineStep {
  PipelineAction action;
  int64_t micro_batch;    // the index among the micro-batches that run (0 .. m - 1)
  int64_t received = -1;  // the paired exchanges' received micro-batch; -1 otherwise
  bool operator==(const PipelineStep&) const = default;
};

// Stage `stage` of `stages` (0 first) over `micro_batches` micro-batches (0: no steps). Throws
// MLPT_INVALID_ARGUMENT naming the argument when stage is outside [0, stages) or a count is negative.
std::vector<PipelineStep> one_forward_one_backward(int stages, int stage, int64_t micro_batches);

// "forward 3", "send_forward_recv_backward 2 (receives 0)": for traces and test messages.
std::string describe(const PipelineStep& step);

}  // namespace mlpt::ref
