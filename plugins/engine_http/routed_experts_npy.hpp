// Routed experts as vLLM returns them (`routed_experts`: a base64-encoded NumPy .npy array of shape
// (positions, moe layers, experts per token), dtype uint8, uint16, int16 or int32), turned into the
// engine result's layout: one [position][k] int16 vector per MoE layer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace mlpt::engine_http {

// `positions` is what the result must hold; the array may hold fewer (vLLM leaves out the last
// sampled token, which was never fed): those positions are -1. Throws sdk::Error (MLPT_INTERNAL)
// naming what does not fit (not base64, not .npy, another dtype, layers or top-k, too many positions).
std::vector<std::vector<int16_t>> routed_experts_from_npy_base64(const std::string& text, size_t positions, size_t layers, size_t k);

}  // namespace mlpt::engine_http
