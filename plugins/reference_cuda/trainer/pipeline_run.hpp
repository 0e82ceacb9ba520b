// One pipeline stage's loss-gradient pass in the 1F1B order of pipeline_schedule.hpp, for both
// trainers: the caller's forward and backward of each micro-batch, and between them the
// stage-boundary messages, sent and received here over the pipeline group (rank = stage) as fp32.
// The forward and backward get the message buffers through a StageBoundary
// (model/parallel/stage_boundary.hpp) instead of the model exchanging them itself, so a stage sends
// a forward's output while it receives a backward's gradient (one send_recv). The messages live in
// the memory the pipeline communicator reads: the backend's for the device trainer, host memory for
// the CPU trainer.
#pragma once

#include <cstddef>
#include <functional>
#include <vector>

#include "model/parallel/communicator.hpp"
#include "model/parallel/stage_boundary.hpp"
#include "ops/ops.hpp"
#include "trainer/pipeline_schedule.hpp"

namespace mlpt::ref {

// A micro-batch's forward or backward on this stage: `micro_batch` indexes the ones that run.
using StagePass = std::function<void(size_t micro_batch, const StageBoundary& boundary)>;

// The messages a stage has in flight: at most one of each kind at a time in the 1F1B order.
enum class StageMessage { input, output, output_gradient, input_gradient };
// Room for `floats` floats of `message`, valid until that message's room is asked for again.
using MessageMemory = std::function<float*(StageMessage message, size_t floats)>;

// Runs this stage's steps over the micro-batches whose messages are message_floats[j] floats
// (tokens × hidden) each, in `memory`; `pipeline` may be NULL with one stage. Returns the steps as
// run.
std::vector<PipelineStep> run_one_forward_one_backward(Communicator* pipeline, int stages, int stage,
                                                       const std::vector<size_t>& message_floats,
                                                       const MessageMemory& memory, const StagePass& forward,
                                                       const StagePass& backward);

// The same with the messages in the backend's memory (the device trainer).
std::vector<PipelineStep> run_one_forward_one_backward(Ops& ops, Communicator* pipeline, int stages,
                                                       int stage, const std::vector<size_t>& message_floats,
                                                       const StagePass& forward, const StagePass& backward);

// Message memory in host memory (the CPU trainer), freed with the returned function.
MessageMemory host_message_memory();

// A debugging and test hook: when the environment names a folder in MLPT_PIPELINE_TRACE, writes
// the steps a rank ran in its last step there, as pipeline_rank<rank>.txt ("stage S of P", then
// one step a line). Does nothing otherwise.
void trace_pipeline_steps(int rank, int stages, int stage, const std::vector<PipelineStep>& steps);

}  // namespace mlpt::ref
