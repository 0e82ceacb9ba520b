// A pipeline stage's boundary messages left to the caller: the trainers' 1F1B schedule
// (trainer/pipeline_run.hpp) sends and receives them, pairing a send with a receive, so the model
// reads `input` and writes `output` instead of exchanging them with the neighbouring stages itself.
// fp32 [tokens, hidden], in the memory the pipeline group's communicator reads (the CPU model's:
// host memory; the device model's: the backend's, its bf16 values widened exactly). Forward: input
// the residual stream entering this stage (a stage after the first), output the one leaving it (a
// stage before the last). Backward: input d(this stage's output) (a stage before the last), output
// d(its input) (a stage after the first).
#pragma once

namespace mlpt::ref {

struct StageBoundary {
  const float* input = nullptr;
  float* output = nullptr;
};

}  // namespace mlpt::ref
