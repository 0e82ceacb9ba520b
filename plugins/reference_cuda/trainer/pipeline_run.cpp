#include "trainer/pipeline_run.hpp"

#include <array>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>

#include "mlpt/sdk/error.hpp"

namespace mlpt::ref {

std::vector<PipelineStep> run_one_forward_one_backward(Communicator* pipeline, int stages, int stage,
                                                       const std::vector<size_t>& message_floats,
                                                       const MessageMemory& memory, const StagePass& forward,
                                                       const StagePass& backward) {
  if (stages > 1 && !pipeline)
    throw sdk::Error(MLPT_INTERNAL,
                     "pipeline pass: " + std::to_string(stages) + " stages without a pipeline group");
  const bool first = stage == 0, last = stage == stages - 1;
  // Where each message in flight is: set when its room is taken (a receive, or the pass writing it).
  float *input = nullptr, *output = nullptr, *output_gradient = nullptr, *input_gradient = nullptr;
  auto floats = [&](int64_t j) { return message_floats.at(static_cast<size_t>(j)); };
  auto grow = [&](float*& at, StageMessage message, int64_t j) { return at = memory(message, floats(j)); };
  const std::vector<PipelineStep> steps =
      one_forward_one_backward(stages, stage, static_cast<int64_t>(message_floats.size()));
  for (const PipelineStep& s : steps) {
    const size_t j = static_cast<size_t>(s.micro_batch);
    switch (s.action) {
      case PipelineAction::recv_forward:
        pipeline->recv(grow(input, StageMessage::input, s.micro_batch), floats(s.micro_batch), stage - 1);
        break;
      case PipelineAction::forward: {
        const StageBoundary boundary{first ? nullptr : input,
                                     last ? nullptr : grow(output, StageMessage::output, s.micro_batch)};
        forward(j, boundary);
        break;
      }
      case PipelineAction::send_forward:
        pipeline->send(output, floats(s.micro_batch), stage + 1);
        break;
      case PipelineAction::recv_backward:
        pipeline->recv(grow(output_gradient, StageMessage::output_gradient, s.micro_batch),
                       floats(s.micro_batch), stage + 1);
        break;
      case PipelineAction::backward: {
        const StageBoundary boundary{
            last ? nullptr : output_gradient,
            first ? nullptr : grow(input_gradient, StageMessage::input_gradient, s.micro_batch)};
        backward(j, boundary);
        break;
      }
      case PipelineAction::send_backward:
        pipeline->send(input_gradient, floats(s.micro_batch), stage - 1);
        break;
      case PipelineAction::send_forward_recv_backward:
        pipeline->send_recv(output, floats(s.micro_batch), stage + 1,
                            grow(output_gradient, StageMessage::output_gradient, s.received),
                            floats(s.received), stage + 1);
        break;
      case PipelineAction::send_backward_recv_forward:
        pipeline->send_recv(input_gradient, floats(s.micro_batch), stage - 1,
                            grow(input, StageMessage::input, s.received), floats(s.received), stage - 1);
        break;
    }
  }
  return steps;
}

std::vector<PipelineStep> run_one_forward_one_backward(Ops& ops, Communicator* pipeline, int stages,
                                                       int stage, const std::vector<size_t>& message_floats,
                                                       const StagePass& forward, const StagePass& backward) {
  std::array<Buffer, 4> buffers;  // by StageMessage
  const MessageMemory memory = [&](StageMessage message, size_t floats) {
    return take<float>(ops, buffers[static_cast<size_t>(message)], static_cast<int64_t>(floats));
  };
  return run_one_forward_one_backward(pipeline, stages, stage, message_floats, memory, forward, backward);
}

MessageMemory host_message_memory() {
  auto buffers = std::make_shared<std::array<std::vector<float>, 4>>();  // by StageMessage
  return [buffers](StageMessage message, size_t floats) {
    std::vector<float>& b = (*buffers)[static_cast<size_t>(message)];
    if (b.size() < floats) b.resize(floats);
    return b.data();
  };
}

void trace_pipeline_steps(int rank, int stages, int stage, const std::vector<PipelineStep>& steps) {
  const char* folder = std::getenv("MLPT_PIPELINE_TRACE");
  if (!folder || !*folder) return;
  const std::string path = std::string(folder) + "/pipeline_rank" + std::to_string(rank) + ".txt";
  std::ofstream out(path, std::ios::trunc);
  if (!out) throw sdk::Error(MLPT_INVALID_ARGUMENT, "MLPT_PIPELINE_TRACE: cannot write " + path);
  out << "stage " << stage << " of " << stages << "\n";
  for (const PipelineStep& s : steps) out << describe(s) << "\n";
}

}  // namespace mlpt::ref
