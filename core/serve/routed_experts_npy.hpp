// Routed experts as vLLM returns them in a completion (`routed_experts`): a NumPy .npy array,
// base64-encoded, of shape (positions, moe layers, experts per token). Here the dtype is int16
// ("<i2"), so a position the engine never computed can hold -1.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace mlpt::serve {

// `experts` is [position][layer][k], positions * layers * k values.
std::string routed_experts_npy_base64(const std::vector<int16_t>& experts, size_t positions, size_t layers, size_t k);

}  // namespace mlpt::serve
