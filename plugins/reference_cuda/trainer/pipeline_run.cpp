#include "trainer/pipeline_run.hpp"

#include <cstdlib>
#include <fstream>
#include <string>

#include "mlpt/sdk/error.hpp"

namespace mlpt::ref {

std::vector<PipelineStep> run_one_forward_one_backward(Ops& ops, Communicator* pipeline, int stages,
                                                       int stage, const std::vector<size_t>& message_floats,
                                                       const StagePass& forward, const StagePass& backward) {
  if (stages > 1 && !pipeline)
    throw sdk::Error(MLPT_INTERNAL,
                     "pipeline pass: " + std::to_string(stages) + " stages without a pipeline group");
  const bool first = stage == 0, last = stage == stages - 1;
  // The messages in flight: at most one of each kind at a time in the 1F1B order.
  Buffer input, output, output_gradient, input_gradient;
  auto floats = [&](int64_t j) { return message_floats.at(static_cast<size_t>(j)); };
  auto grow = [&](Buffer& b, int64_t j) { return take<float>(ops, b, static_cast<int64_t>(floats(j))); };
  const std::vector<PipelineStep> steps =
      one_forward_one_backward(stages, stage, static_cast<int64_t>(message_floats.size()));
  for (const PipelineStep& s : steps) {
    const size_t j = static_cast<size_t>(s.micro_batch);
    switch (s.action) {
      case PipelineAction::recv_forward:
        pipeline->recv(grow(input, s.micro_batch), floats(j), stage - 1);
        break;
      case PipelineAction::forward: {
        const dev::StageBoundary boundary{first ? nullptr : input.as<float>(),
                                          last ? nullptr : grow(output, s.micro_batch)};
        forward(j, boundary);
        break;
      }
      case PipelineAction::send_forward:
        pipeline->send(output.as<float>(), floats(j), stage + 1);
        break;
      case PipelineAction::recv_backward:
        pipeline->recv(grow(output_gradient, s.micro_batch), floats(j), stage + 1);
        break;
      case PipelineAction::backward: {
        const dev::StageBoundary boundary{last ? nullptr : output_gradient.as<float>(),
                                          first ? nullptr : grow(input_gradient, s.micro_batch)};
        backward(j, boundary);
        break;
      }
      case PipelineAction::send_backward:
        pipeline->send(input_gradient.as<float>(), floats(j), stage - 1);
        break;
      case PipelineAction::send_forward_recv_backward:
        pipeline->send_recv(output.as<float>(), floats(j), stage + 1, grow(output_gradient, s.received),
                            floats(s.received), stage + 1);
        break;
      case PipelineAction::send_backward_recv_forward:
        pipeline->send_recv(input_gradient.as<float>(), floats(j), stage - 1, grow(input, s.received),
                            floats(s.received), stage - 1);
        break;
    }
  }
  return steps;
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
