// Routed experts (R3) have one layout for the engines that record them and one for the trainers
// that replay them; this is the one place that converts between them.
//   recorded (engine.h, a request's result): per MoE layer, [position][k]
//   replayed (trainer.h, mlpt_train_batch; also the 1.0/1.1 blocking generate): [position][layer][k]
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace mlpt::sdk {

// Interleaves `layers` per-layer arrays of `positions` x `k` expert ids into `out`, which holds
// positions x layers x k ids, in the replayed layout.
inline void routed_experts_by_position(const int16_t* const* per_layer, size_t layers, size_t positions, size_t k,
                                       int16_t* out) {
  for (size_t p = 0; p < positions; ++p)
    for (size_t l = 0; l < layers; ++l) std::copy_n(per_layer[l] + p * k, k, out + (p * layers + l) * k);
}

}  // namespace mlpt::sdk
