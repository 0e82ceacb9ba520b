// GRPO advantages as the reference computes them (docs/benchmark.md §3): leave-one-out baseline, each
// sample normalised by the Bessel-corrected std of the OTHER samples of its group, not divided where
// that std is 0. All-equal groups get advantage 0 and stay in the batch.
#pragma once

#include <vector>

namespace mlpt::rl {

// `rewards` of one group (>= 2 samples). `epsilon` is added to the std before dividing.
std::vector<double> leave_one_out_advantages(const std::vector<double>& rewards, double epsilon);

}  // namespace mlpt::rl
