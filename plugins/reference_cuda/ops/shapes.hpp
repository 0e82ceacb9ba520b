// The shapes the sequence and expert ops take, shared by the ops interface and every backend.
#pragma once

#include <cstdint>

namespace mlpt::ref {

struct AttentionShape {
  int64_t num_heads;     // H
  int64_t num_kv_heads;  // Hkv, divides H
  int64_t head_dim;      // D
};

struct GdnShape {
  int64_t num_key_heads;    // Hk
  int64_t num_value_heads;  // Hv, a multiple of Hk
  int64_t key_dim;          // dk
  int64_t value_dim;        // dv
};

struct MoeShape {
  int64_t hidden;        // H
  int64_t num_experts;   // E
  int64_t top_k;         // k
  int64_t intermediate;  // I
  bool norm_topk_prob;   // renormalise the top-k probabilities (Qwen3.5: true)
};

// One row's sampling request: softmax(logits / temperature) over [0, valid), top-p when top_p < 1,
// the draw counter_uniform(seed, counter) (model/counter_uniform.hpp).
struct SamplingRow {
  float temperature;  // > 0
  float top_p;        // (0, 1]
  uint64_t seed, counter;
};

// One AdamW step's constants (every tensor of a step alike).
struct AdamWStep {
  double lr, beta1, beta2, eps, weight_decay;
  int64_t step;       // 1-based
  double grad_scale;  // gradient multiplier (clipping)
};

}  // namespace mlpt::ref
