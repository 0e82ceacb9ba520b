// The oracle the CUDA engine tests hold tokens to: the fp32 CPU model's logits
// (tests/support/device_model_fixtures.hpp).
#pragma once

#include "device_model_fixtures.hpp"

namespace cuda_testing {

using model_testing::cpu_logits;

}  // namespace cuda_testing
