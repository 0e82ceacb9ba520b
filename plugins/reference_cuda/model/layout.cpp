#include "model/layout.hpp"

namespace mlpt::ref {

int64_t TensorSpec::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

int ModelLayout::index_of(const std::string& name) const {
  for (size_t i = 0; i < tensors.size(); ++i)
    if (tensors[i].name == name) return static_cast<int>(i);
  return -1;
}

ModelLayout make_layout(const ModelConfig& c) {
  ModelLayout m;
  const std::string p = "model.language_model.";
  auto add = [&](std::string name, std::vector<int64_t> shape, Init init) {
    m.tensors.push_back({std::move(name), std::move(shape), init});
    return static_cast<int>(m.tensors.size() - 1);
  };
  const int64_t H = c.hidden_size;
  m.embed = add(p + "embed_tokens.weight", {c.vocab_size, H}, Init::normal);
  for (int64_t l = 0; l < c.num_layers; ++l) {
    std::string lp = p + "layers." + std::to_string(l) + ".";
    LayerTensors t{};
    t.attention = c.attention_layer[l];
    t.input_norm = add(lp + "input_layernorm.weight", {H}, Init::zeros);
    if (t.attention) {
      std::string a = lp + "self_attn.";
      int64_t qd = c.num_heads * c.head_dim, kvd = c.num_kv_heads * c.head_dim;
      t.attn.q = add(a + "q_proj.weight", {2 * qd, H}, Init::normal);
      t.attn.k = add(a + "k_proj.weight", {kvd, H}, Init::normal);
      t.attn.v = add(a + "v_proj.weight", {kvd, H}, Init::normal);
      t.attn.o = add(a + "o_proj.weight", {H, qd}, Init::normal);
      t.attn.q_norm = add(a + "q_norm.weight", {c.head_dim}, Init::zeros);
      t.attn.k_norm = add(a + "k_norm.weight", {c.head_dim}, Init::zeros);
    } else {
      std::string g = lp + "linear_attn.";
      t.gdn.qkv = add(g + "in_proj_qkv.weight", {c.conv_dim(), H}, Init::normal);
      t.gdn.z = add(g + "in_proj_z.weight", {c.value_dim(), H}, Init::normal);
      t.gdn.b = add(g + "in_proj_b.weight", {c.gdn_value_heads, H}, Init::normal);
      t.gdn.a = add(g + "in_proj_a.weight", {c.gdn_value_heads, H}, Init::normal);
      t.gdn.conv = add(g + "conv1d.weight", {c.conv_dim(), 1, c.conv_kernel}, Init::conv);
      t.gdn.a_log = add(g + "A_log", {c.gdn_value_heads}, Init::a_log);
      t.gdn.dt_bias = add(g + "dt_bias", {c.gdn_value_heads}, Init::ones);
      t.gdn.norm = add(g + "norm.weight", {c.gdn_value_dim}, Init::ones);
      t.gdn.out = add(g + "out_proj.weight", {H, c.value_dim()}, Init::normal);
    }
    t.post_norm = add(lp + "post_attention_layernorm.weight", {H}, Init::zeros);
    std::string mp = lp + "mlp.";
    t.moe.router = add(mp + "gate.weight", {c.num_experts, H}, Init::normal);
    t.moe.gate_up = add(mp + "experts.gate_up_proj", {c.num_experts, 2 * c.moe_intermediate, H}, Init::normal);
    t.moe.down = add(mp + "experts.down_proj", {c.num_experts, H, c.moe_intermediate}, Init::normal);
    t.moe.shared_gate = add(mp + "shared_expert.gate_proj.weight", {c.shared_intermediate, H}, Init::normal);
    t.moe.shared_up = add(mp + "shared_expert.up_proj.weight", {c.shared_intermediate, H}, Init::normal);
    t.moe.shared_down = add(mp + "shared_expert.down_proj.weight", {H, c.shared_intermediate}, Init::normal);
    t.moe.shared_expert_gate = add(mp + "shared_expert_gate.weight", {1, H}, Init::normal);
    m.layers.push_back(t);
  }
  m.final_norm = add(p + "norm.weight", {H}, Init::zeros);
  m.lm_head = add("lm_head.weight", {c.vocab_size, H}, Init::normal);
  return m;
}

std::vector<bool> routed_expert_tensors(const ModelLayout& layout) {
  std::vector<bool> routed(layout.tensors.size(), false);
  for (const LayerTensors& l : layout.layers)
    for (int i : {l.moe.gate_up, l.moe.down})
      if (i >= 0 && static_cast<size_t>(i) < routed.size()) routed[static_cast<size_t>(i)] = true;
  return routed;
}

}  // namespace mlpt::ref
