// The weights of the sharded test plugin, by global element index: the test's independent truth.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace weight_flow_test {

// A distinct bit pattern per tensor, element and version (negative zero and fractions included).
inline float weight_value(const std::string& name, size_t index, uint64_t version) {
  const float base = name == "w" ? static_cast<float>(index) * 1.25f - 7.0f : -static_cast<float>(index) / 3.0f;
  return base + static_cast<float>(version) * 0.0625f;
}

}  // namespace weight_flow_test
