// One pipeline stage's loss-gradient pass on the device, in the 1F1B order of
// pipeline_schedule.hpp: the caller's forward and backward of each micro-batch, and between them
// the stage-boundary messages, sent and received here over the pipeline group (rank = stage) as
// fp32 in the backend's memory. The forward and backward get the message buffers through a
// dev::StageBoundary (device_model/model.hpp) instead of the model exchanging them itself, so a
// stage sends a forward's output while it receives a backward's gradient (one send_recv).
#pragma once

#include <cstddef>
#include <functional>
#include <vector>

#include "device_model/model.hpp"
#include "model/parallel/communicator.hpp"
#include "trainer/pipeline_schedule.hpp"

namespace mlpt::ref {

// A micro-batch's forward or backward on this stage: `micro_batch` indexes the ones that run.
using StagePass = std::function<void(size_t micro_batch, const dev::StageBoundary& boundary)>;

// Runs this stage's steps over the micro-batches whose messages are message_floats[j] floats
// (tokens × hidden) each; `pipeline` may be NULL with one stage. Returns the steps as run.
std::vector<PipelineStep> run_one_forward_one_backward(Ops& ops, Communicator* pipeline, int stages,
                                                       int stage, const std::vector<size_t>& message_floats,
                                                       const StagePass& forward, const StagePass& backward);

// A debugging and test hook: when the environment names a folder in MLPT_PIPELINE_TRACE, writes
// the steps a rank ran in its last step there, as pipeline_rank<rank>.txt ("stage S of P", then
// one step a line). Does nothing otherwise.
void trace_pipeline_steps(int rank, int stages, int stage, const std::vector<PipelineStep>& steps);

}  // namespace mlpt::ref
