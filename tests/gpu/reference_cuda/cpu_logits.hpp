// The oracle the CUDA engine tests hold tokens to: the fp32 CPU model's logits.
#pragma once

#include <cstdint>
#include <vector>

#include "model/model.hpp"

namespace cuda_testing {

// fp32 CPU logits after every token of `tokens`, [n, V].
inline std::vector<float> cpu_logits(const mlpt::ref::Weights<float>& w, const std::vector<int32_t>& tokens) {
  mlpt::ref::ForwardBatch<float> fb;
  fb.tokens = tokens.data();
  fb.offsets = {0, static_cast<int64_t>(tokens.size())};
  const auto hidden = mlpt::ref::forward_hidden(w, fb);
  std::vector<float> logits(tokens.size() * size_t(w.config.vocab_size));
  mlpt::ref::lm_head_forward(w, static_cast<int64_t>(tokens.size()), hidden.data(), logits.data());
  return logits;
}

}  // namespace cuda_testing
