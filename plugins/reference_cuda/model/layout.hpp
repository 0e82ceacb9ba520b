// Every parameter tensor of the model, with its checkpoint name (Qwen3.5 naming,
// docs/qwen35-architecture.md §5), shape and initialisation, and where each layer finds its tensors.
// The same layout orders weights, gradients, optimizer moments and exported tensors.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/config.hpp"

namespace mlpt::ref {

enum class Init {
  normal,       // N(0, initializer_range): linears, embedding, LM head, routers, experts
  zeros,        // zero-centred RMSNorm weights (1 + w)
  ones,         // the GDN gated output norm (plain w) and dt_bias
  a_log,        // log U(0.01, 16)
  conv,         // U(-1/sqrt(K), 1/sqrt(K)), PyTorch's Conv1d default
};

struct TensorSpec {
  std::string name;
  std::vector<int64_t> shape;
  Init init;
  int64_t numel() const;
};

struct GdnTensors { int qkv, z, b, a, conv, a_log, dt_bias, norm, out; };
struct AttentionTensors { int q, k, v, o, q_norm, k_norm; };
struct MoeTensors { int router, gate_up, down, shared_gate, shared_up, shared_down, shared_expert_gate; };

struct LayerTensors {
  bool attention;
  int input_norm, post_norm;
  GdnTensors gdn{};             // when !attention
  AttentionTensors attn{};      // when attention
  MoeTensors moe{};
};

struct ModelLayout {
  std::vector<TensorSpec> tensors;
  int embed = -1, final_norm = -1, lm_head = -1;
  std::vector<LayerTensors> layers;
  int index_of(const std::string& name) const;  // -1 when absent
};

ModelLayout make_layout(const ModelConfig& config);

// Which tensors of `layout` are the routed experts' (gate_up and down of each MoE layer).
std::vector<bool> routed_expert_tensors(const ModelLayout& layout);

}  // namespace mlpt::ref
