#include "trainer/pipeline_schedule.hpp"

#include <algorithm>

#include "mlpt/sdk/error.hpp"

namespace mlpt::ref {

std::vector<PipelineStep> one_forward_one_backward(int stages, int stage, int64_t micro_batches) {
  if (stages < 1 || stage < 0 || stage >= stages)
    throw sdk::Error(MLPT_INVALID_ARGUMENT, "pipeline schedule: stage " + std::to_string(stage) +
                                                " is outside the " + std::to_string(stages) + " stages");
  if (micro_batches < 0)
    throw sdk::Error(MLPT_INVALID_ARGUMENT,
                     "pipeline schedule: micro_batches " + std::to_string(micro_batches) + " is negative");
  using A = PipelineAction;
  const bool first = stage == 0, last = stage == stages - 1;
  const int64_t m = micro_batches, warm_up = std::min<int64_t>(stages - stage - 1, m), steady = m - warm_up;
  std::vector<PipelineStep> steps;
  auto add = [&](A action, int64_t k, int64_t received = -1) { steps.push_back({action, k, received}); };
  for (int64_t k = 0; k < warm_up; ++k) {
    if (!first) add(A::recv_forward, k);
    add(A::forward, k);
    if (!last) add(A::send_forward, k);
  }
  if (steady > 0 && !first) add(A::recv_forward, warm_up);
  for (int64_t i = 0; i < steady; ++i) {  // forward warm_up + i, then backward i
    const int64_t f = warm_up + i;
    add(A::forward, f);
    if (!last) add(A::send_forward_recv_backward, f, i);
    add(A::backward, i);
    if (first) continue;
    if (i + 1 < steady)
      add(A::send_backward_recv_forward, i, f + 1);
    else
      add(A::send_backward, i);
  }
  for (int64_t k = steady; k < m; ++k) {
    if (!last) add(A::recv_backward, k);
    add(A::backward, k);
    if (!first) add(A::send_backward, k);
  }
  return steps;
}

std::string describe(const PipelineStep& step) {
  static const char* const names[] = {"recv_forward",
                                      "forward",
                                      "send_forward",
                                      "recv_backward",
                                      "backward",
                                      "send_backward",
                                      "send_forward_recv_backward",
                                      "send_backward_recv_forward"};
  std::string s = std::string(names[static_cast<int>(step.action)]) + " " + std::to_string(step.micro_batch);
  if (step.received >= 0) s += " (receives " + std::to_string(step.received) + ")";
  return s;
}

}  // namespace mlpt::ref
