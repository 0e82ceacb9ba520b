// Model configurations small enough for float64 finite differences, as HF config documents.
#pragma once

#include <nlohmann/json.hpp>

#include "model/config.hpp"

namespace mlpt_test {

// 4 layers (GDN, GDN, GDN, attention), every dimension tiny but every kind of head grouping real:
// 2 query heads per KV head, 2 value heads per GDN key head, top-2 of 4 experts, partial RoPE.
inline nlohmann::json micro_config_json(int64_t vocab = 37) {
  nlohmann::json text = {
      {"model_type", "qwen3_5_moe_text"},
      {"vocab_size", vocab},
      {"hidden_size", 16},
      {"num_hidden_layers", 4},
      {"num_attention_heads", 2},
      {"num_key_value_heads", 1},
      {"head_dim", 8},
      {"linear_num_key_heads", 1},
      {"linear_num_value_heads", 2},
      {"linear_key_head_dim", 4},
      {"linear_value_head_dim", 4},
      {"linear_conv_kernel_dim", 4},
      {"num_experts", 4},
      {"num_experts_per_tok", 2},
      {"moe_intermediate_size", 8},
      {"shared_expert_intermediate_size", 8},
      {"norm_topk_prob", true},
      {"rms_norm_eps", 1e-6},
      {"max_position_embeddings", 4096},
      {"rope_parameters", {{"rope_type", "default"}, {"rope_theta", 10000.0}, {"partial_rotary_factor", 0.5}}},
      {"initializer_range", 0.02},
      {"dtype", "float32"},
  };
  return {{"model_type", "qwen3_5_moe"}, {"text_config", text}};
}

inline mlpt::ref::ModelConfig micro_config(int64_t vocab = 37) {
  return mlpt::ref::parse_model_config(micro_config_json(vocab), "micro_config");
}

}  // namespace mlpt_test
