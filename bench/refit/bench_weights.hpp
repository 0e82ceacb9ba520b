// Weights for the refit benches: a model's real tensor list (the reference model's layout) with
// random bits, and an optimizer step as the refit sees it (a fraction of the elements get new bits).
#pragma once

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "mlpt/mlpt.h"
#include "model/config.hpp"
#include "model/layout.hpp"

namespace refit_bench {

struct Model {
  std::string label;
  std::vector<std::string> names;
  std::vector<std::vector<int64_t>> shapes;
  std::vector<std::vector<std::byte>> data;
  std::vector<mlpt_named_tensor> views;  // over data
  DLDataType dtype{};
  uint64_t bytes = 0;
};

// The tensors of `config` whose names start with one of `only_prefixes` (all when empty).
inline Model make_model(const std::string& label, const mlpt::ref::ModelConfig& config, DLDataType dtype,
                        const std::vector<std::string>& only_prefixes) {
  Model m;
  m.label = label, m.dtype = dtype;
  std::mt19937_64 rng(1);
  for (const auto& t : mlpt::ref::make_layout(config).tensors) {
    bool keep = only_prefixes.empty();
    for (const auto& p : only_prefixes) keep |= t.name.rfind(p, 0) == 0;
    if (!keep) continue;
    m.names.push_back(t.name);
    m.shapes.push_back(t.shape);
    m.data.emplace_back(static_cast<size_t>(t.numel()) * dtype.bits / 8);
    for (size_t i = 0; i + 8 <= m.data.back().size(); i += 8) {
      const uint64_t x = rng();
      std::memcpy(m.data.back().data() + i, &x, 8);
    }
    m.bytes += m.data.back().size();
  }
  for (size_t i = 0; i < m.names.size(); ++i) {
    mlpt_named_tensor v{};
    v.struct_size = MLPT_NAMED_TENSOR_STRUCT_SIZE;
    v.name = {m.names[i].data(), m.names[i].size()};
    v.tensor.data = m.data[i].data();
    v.tensor.device = {kDLCPU, 0};
    v.tensor.ndim = static_cast<int32_t>(m.shapes[i].size());
    v.tensor.dtype = dtype;
    v.tensor.shape = m.shapes[i].data();
    m.views.push_back(v);
  }
  return m;
}

// An optimizer step as the refit sees it: `fraction` of each tensor's elements, at random
// positions, get their lowest bit flipped (a one-ulp update, as a step at a small learning rate).
// With `marks`, it also marks each element it writes in a change mask per tensor, as a trainer's
// optimizer step would (mlpt/sdk/changed_elements.hpp): bit i % 64 of word i / 64, cleared first.
inline void step(Model& m, double fraction, std::mt19937_64& rng,
                 std::vector<std::vector<uint64_t>>* marks = nullptr) {
  const size_t width = m.dtype.bits / 8;
  if (marks) marks->resize(m.data.size());
  for (size_t t = 0; t < m.data.size(); ++t) {
    auto& d = m.data[t];
    const size_t n = d.size() / width, k = static_cast<size_t>(static_cast<double>(n) * fraction);
    if (marks) (*marks)[t].assign((n + 63) / 64, 0);
    for (size_t j = 0; j < k; ++j) {
      const size_t i = rng() % n;
      d[i * width] ^= std::byte{0x01};
      if (marks) (*marks)[t][i / 64] |= uint64_t{1} << (i % 64);
    }
  }
}

}  // namespace refit_bench
