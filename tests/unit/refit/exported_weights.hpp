// Weights as a trainer exports them, for the sparse refit's tests: FP32 and BF16 tensors with random
// bits in owned vectors, named views over them, and an optimizer-like step that changes a few.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "mlpt/mlpt.h"

namespace refit_test {

struct ExportedWeights {
  std::vector<std::string> names{"embed.weight", "layers.0.norm.weight", "layers.0.mlp.bf16"};
  std::vector<std::vector<int64_t>> shapes;
  std::vector<DLDataType> dtypes{{kDLFloat, 32, 1}, {kDLFloat, 32, 1}, {kDLBfloat, 16, 1}};
  std::vector<std::vector<std::byte>> data;
  std::vector<mlpt_named_tensor> views;
  std::mt19937_64 rng;

  // `scale` multiplies every dimension of the base shapes ({64, 32}, {32}, {16, 24}).
  explicit ExportedWeights(int64_t scale = 1, uint64_t seed = 42)
      : shapes{{64 * scale, 32 * scale}, {32 * scale}, {16 * scale, 24 * scale}}, rng(seed) {
    for (size_t i = 0; i < names.size(); ++i) {
      int64_t n = 1;
      for (auto d : shapes[i]) n *= d;
      data.emplace_back(static_cast<size_t>(n) * dtypes[i].bits / 8);
      for (auto& b : data.back()) b = static_cast<std::byte>(rng());
    }
    for (size_t i = 0; i < names.size(); ++i) {
      mlpt_named_tensor t{};
      t.struct_size = MLPT_NAMED_TENSOR_STRUCT_SIZE;
      t.name = {names[i].data(), names[i].size()};
      t.tensor.data = data[i].data();
      t.tensor.device = {kDLCPU, 0};
      t.tensor.ndim = static_cast<int32_t>(shapes[i].size());
      t.tensor.dtype = dtypes[i];
      t.tensor.shape = shapes[i].data();
      views.push_back(t);
    }
  }
  // Change masks (mlpt/sdk/changed_elements.hpp), one per tensor: each step marks the elements it
  // writes, as a trainer's optimizer step does; clear_marks() starts a new list.
  std::vector<std::vector<uint64_t>> marks;

  // An optimizer-like step: `k` random elements per tensor get new bits, and are marked.
  void step(int k) {
    marks.resize(data.size());
    for (size_t i = 0; i < data.size(); ++i) {
      const size_t width = dtypes[i].bits / 8, n = data[i].size() / width;
      marks[i].resize((n + 63) / 64);
      for (int j = 0; j < k; ++j) {
        const size_t e = rng() % n;
        data[i][e * width] ^= std::byte{0x5a};
        marks[i][e / 64] |= uint64_t{1} << (e % 64);
      }
    }
  }
  void clear_marks() {
    for (auto& m : marks) std::fill(m.begin(), m.end(), 0);
  }
  uint64_t bytes() const {
    uint64_t b = 0;
    for (const auto& d : data) b += d.size();
    return b;
  }
};

}  // namespace refit_test
