#include "model/parallel/shard_weights.hpp"

#include <string>
#include <tuple>

#include "mlpt/sdk/error.hpp"
#include "model/parallel/pipeline_stages.hpp"
#include "model/parallel/shard_boxes.hpp"
#include "model/parallel/vocab_parallel.hpp"

namespace mlpt::ref {

namespace {

void require_split(int64_t value, int parts, const char* what, const char* over) {
  if (value % parts != 0)
    throw sdk::Error(MLPT_INVALID_ARGUMENT, std::string(what) + " " + std::to_string(value) + " do not split over " +
                                                over + " " + std::to_string(parts));
}

// Rows [begin, end) of a row-major matrix `width` wide, appended to `to`.
template <class T>
void take_rows(const std::vector<T>& from, int64_t width, int64_t begin, int64_t end, std::vector<T>& to) {
  to.insert(to.end(), from.begin() + begin * width, from.begin() + end * width);
}

// Columns [begin, end) of every row of `rows` × `width` matrices starting at `from`, appended.
template <class T>
void take_columns(const T* from, int64_t rows, int64_t width, int64_t begin, int64_t end, std::vector<T>& to) {
  for (int64_t r = 0; r < rows; ++r) to.insert(to.end(), from + r * width + begin, from + r * width + end);
}

// The embedding and LM head of a shard: its vocabulary range's rows (all of them unless the shard
// splits the vocabulary).
void keep_vocab_rows(ModelLayout& layout, int64_t vocab, const ModelShard& shard) {
  for (int t : {layout.embed, layout.lm_head})
    layout.tensors[static_cast<size_t>(t)].shape[0] = vocab_range(vocab, shard).count();
}

}  // namespace

ModelConfig shard_config(const ModelConfig& full, const ModelShard& s) {
  if (full.shard.sharded()) throw sdk::Error(MLPT_INTERNAL, "shard_config: the config is already a shard");
  if (s.etp != 1 && s.etp != s.tp)
    throw sdk::Error(MLPT_INVALID_ARGUMENT, "expert tensor parallel " + std::to_string(s.etp) + " is neither 1 (whole experts) nor tp " +
                                                std::to_string(s.tp));
  if (s.tp < 1 || s.ep < 1 || s.tp_rank < 0 || s.tp_rank >= s.tp || s.ep_rank < 0 || s.ep_rank >= s.ep)
    throw sdk::Error(MLPT_INVALID_ARGUMENT, "model shard: tp rank " + std::to_string(s.tp_rank) + " of " +
                                                std::to_string(s.tp) + ", ep rank " + std::to_string(s.ep_rank) +
                                                " of " + std::to_string(s.ep));
  if (s.pp < 1 || s.pp_rank < 0 || s.pp_rank >= s.pp)
    throw sdk::Error(MLPT_INVALID_ARGUMENT, "model shard: pipeline stage " + std::to_string(s.pp_rank) + " of " + std::to_string(s.pp));
  (void)stage_layers(full.num_layers, s);  // each stage holds a layer at least
  require_split(full.num_heads, s.tp, "num_attention_heads", "tp");
  if (s.vocab_parallel && full.vocab_size < s.tp)  // any larger vocabulary splits (vocab_parallel.hpp)
    throw sdk::Error(MLPT_INVALID_ARGUMENT, "vocab_size " + std::to_string(full.vocab_size) +
                                                " is smaller than tp " + std::to_string(s.tp) +
                                                " (each rank holds a range of the vocabulary)");
  // KV heads split over tp, or tp a multiple of them (each replicated on tp / num_kv_heads ranks).
  const bool kv_replicated = full.num_kv_heads < s.tp;
  if (kv_replicated && s.tp % full.num_kv_heads != 0)
    throw sdk::Error(MLPT_INVALID_ARGUMENT, "num_key_value_heads " + std::to_string(full.num_kv_heads) +
                                                " neither split over tp " + std::to_string(s.tp) +
                                                " nor divide it (to be replicated)");
  if (!kv_replicated) require_split(full.num_kv_heads, s.tp, "num_key_value_heads", "tp");
  require_split(full.gdn_key_heads, s.tp, "linear_num_key_heads", "tp");
  require_split(full.gdn_value_heads, s.tp, "linear_num_value_heads", "tp");
  require_split(full.moe_intermediate, s.etp, "moe_intermediate_size", "expert tensor parallel");
  require_split(full.shared_intermediate, s.tp, "shared_expert_intermediate_size", "tp");
  require_split(full.num_experts, s.expert_blocks(), "num_experts", s.etp == 1 ? "tp x ep (expert tensor parallel 1)" : "ep");
  ModelConfig c = full;
  c.num_heads /= s.tp;
  c.num_kv_heads = kv_replicated ? 1 : full.num_kv_heads / s.tp;
  c.gdn_key_heads /= s.tp;
  c.gdn_value_heads /= s.tp;
  c.moe_intermediate /= s.etp;
  c.shared_intermediate /= s.tp;
  c.shard = s;
  c.shard.kv_replicas = kv_replicated ? static_cast<int>(s.tp / full.num_kv_heads) : 1;
  return c;
}

template <class T>
Weights<T> shard_weights(const Weights<T>& full, const ModelShard& s) {
  const ModelConfig& f = full.config;
  Weights<T> w;
  w.config = shard_config(f, s);
  const ModelConfig& c = w.config;
  w.layout = make_layout(c);
  w.values.resize(w.layout.tensors.size());
  const int64_t H = f.hidden_size, D = f.head_dim, dk = f.gdn_key_dim, dv = f.gdn_value_dim, K = f.conv_kernel;
  const int r = c.shard.tp_rank;
  // The expert tensors hold every expert, or just this rank's block (read so from a checkpoint).
  const int64_t held = full.layout.tensors[full.layout.layers.at(0).moe.gate_up].shape[0];
  const bool expert_block = held != f.num_experts;
  if (expert_block && held != f.num_experts / s.expert_blocks())
    throw sdk::Error(MLPT_INTERNAL, "shard_weights: the weights hold " + std::to_string(held) + " experts per layer, neither all " +
                                        std::to_string(f.num_experts) + " nor this rank's " +
                                        std::to_string(f.num_experts / s.expert_blocks()));
  auto copy = [&](int local, int whole) { w.values[local] = full.values[whole]; };
  const VocabRange vocab = vocab_range(f.vocab_size, s);  // the embedding's and LM head's rows
  keep_vocab_rows(w.layout, f.vocab_size, s);
  take_rows(full.values[full.layout.embed], f.hidden_size, vocab.begin, vocab.end, w.values[w.layout.embed]);
  copy(w.layout.final_norm, full.layout.final_norm);
  take_rows(full.values[full.layout.lm_head], f.hidden_size, vocab.begin, vocab.end,
            w.values[w.layout.lm_head]);
  for (size_t l = 0; l < w.layout.layers.size(); ++l) {
    const LayerTensors& A = full.layout.layers[l];
    const LayerTensors& B = w.layout.layers[l];
    copy(B.input_norm, A.input_norm);
    copy(B.post_norm, A.post_norm);
    if (A.attention) {  // query heads [h0, h0 + nh), kv heads [g0, g0 + nkv): a GQA group stays whole
      const int64_t nh = c.num_heads, h0 = r * nh, nkv = c.num_kv_heads, g0 = c.shard.first_kv_head(nkv);
      take_rows(full.values[A.attn.q], H, h0 * 2 * D, (h0 + nh) * 2 * D, w.values[B.attn.q]);  // [q; gate] per head
      take_rows(full.values[A.attn.k], H, g0 * D, (g0 + nkv) * D, w.values[B.attn.k]);
      take_rows(full.values[A.attn.v], H, g0 * D, (g0 + nkv) * D, w.values[B.attn.v]);
      take_columns(full[A.attn.o], H, f.num_heads * D, h0 * D, (h0 + nh) * D, w.values[B.attn.o]);
      copy(B.attn.q_norm, A.attn.q_norm);
      copy(B.attn.k_norm, A.attn.k_norm);
    } else {  // key heads [k0, k0 + Hk) and the value heads that read them, [v0, v0 + Hv)
      const int64_t Hk = c.gdn_key_heads, k0 = r * Hk, Hv = c.gdn_value_heads, v0 = r * Hv;
      const int64_t kd = f.key_dim();
      // The conv channels and in_proj_qkv rows: q heads, k heads, v heads, each block sliced.
      for (auto [tensor, local, width] : {std::tuple{A.gdn.qkv, B.gdn.qkv, H}, std::tuple{A.gdn.conv, B.gdn.conv, K}}) {
        take_rows(full.values[tensor], width, k0 * dk, (k0 + Hk) * dk, w.values[local]);
        take_rows(full.values[tensor], width, kd + k0 * dk, kd + (k0 + Hk) * dk, w.values[local]);
        take_rows(full.values[tensor], width, 2 * kd + v0 * dv, 2 * kd + (v0 + Hv) * dv, w.values[local]);
      }
      take_rows(full.values[A.gdn.z], H, v0 * dv, (v0 + Hv) * dv, w.values[B.gdn.z]);
      take_rows(full.values[A.gdn.b], H, v0, v0 + Hv, w.values[B.gdn.b]);
      take_rows(full.values[A.gdn.a], H, v0, v0 + Hv, w.values[B.gdn.a]);
      take_rows(full.values[A.gdn.a_log], 1, v0, v0 + Hv, w.values[B.gdn.a_log]);
      take_rows(full.values[A.gdn.dt_bias], 1, v0, v0 + Hv, w.values[B.gdn.dt_bias]);
      copy(B.gdn.norm, A.gdn.norm);
      take_columns(full[A.gdn.out], H, f.value_dim(), v0 * dv, (v0 + Hv) * dv, w.values[B.gdn.out]);
    }
    // MoE: this rank's block of experts [e0, e0 + El), each one's FFN columns [i0, i0 + Il) (all of
    // them with expert tensor parallel 1); the shared expert's columns split over tp.
    const int64_t I = f.moe_intermediate, Il = c.moe_intermediate, i0 = s.etp == 1 ? 0 : r * Il;
    const int64_t El = f.num_experts / s.expert_blocks(), e0 = expert_block ? 0 : s.expert_block() * El;
    copy(B.moe.router, A.moe.router);
    copy(B.moe.shared_expert_gate, A.moe.shared_expert_gate);
    for (int64_t e = e0; e < e0 + El; ++e) {
      const std::vector<T>& gu = full.values[A.moe.gate_up];
      take_rows(gu, H, e * 2 * I + i0, e * 2 * I + i0 + Il, w.values[B.moe.gate_up]);          // gate
      take_rows(gu, H, e * 2 * I + I + i0, e * 2 * I + I + i0 + Il, w.values[B.moe.gate_up]);  // up
      take_columns(full[A.moe.down] + e * H * I, H, I, i0, i0 + Il, w.values[B.moe.down]);
    }
    w.layout.tensors[B.moe.gate_up].shape[0] = El;
    w.layout.tensors[B.moe.down].shape[0] = El;
    const int64_t Is = c.shared_intermediate, s0 = r * Is;
    take_rows(full.values[A.moe.shared_gate], H, s0, s0 + Is, w.values[B.moe.shared_gate]);
    take_rows(full.values[A.moe.shared_up], H, s0, s0 + Is, w.values[B.moe.shared_up]);
    take_columns(full[A.moe.shared_down], H, f.shared_intermediate, s0, s0 + Is, w.values[B.moe.shared_down]);
  }
  keep_stage_tensors(w.layout, s);  // another stage's tensors: none of their values
  for (size_t i = 0; i < w.values.size(); ++i)
    if (w.layout.tensors[i].numel() == 0) w.values[i].clear();
  for (size_t i = 0; i < w.values.size(); ++i)
    if (static_cast<int64_t>(w.values[i].size()) != w.layout.tensors[i].numel())
      throw sdk::Error(MLPT_INTERNAL, "shard_weights: " + w.layout.tensors[i].name + " has " +
                                          std::to_string(w.values[i].size()) + " values, its shard shape " +
                                          std::to_string(w.layout.tensors[i].numel()));
  return w;
}

ModelLayout shard_layout(const ModelConfig& full, const ModelShard& shard) {
  ModelLayout layout = make_layout(shard_config(full, shard));
  for (const LayerTensors& l : layout.layers)
    for (int t : {l.moe.gate_up, l.moe.down})
      layout.tensors[static_cast<size_t>(t)].shape[0] = full.num_experts / shard.expert_blocks();
  keep_vocab_rows(layout, full.vocab_size, shard);
  keep_stage_tensors(layout, shard);
  return layout;
}

template <class T>
Weights<T> read_shard_weights(const ModelConfig& full, const SafetensorsCheckpoint& checkpoint,
                              const ModelShard& shard, const std::string& prefix,
                              const std::function<void(size_t, std::vector<T>&)>& keep) {
  Weights<T> w;
  w.config = shard_config(full, shard);
  w.layout = shard_layout(full, shard);
  const std::vector<ShardPlacement> placements = shard_placements(full, w.layout, shard);
  std::vector<T> box_values;
  for (size_t i = 0; i < w.layout.tensors.size(); ++i) {
    const TensorSpec& spec = w.layout.tensors[i];
    w.values.emplace_back(static_cast<size_t>(spec.numel()), T(0));
    for (const ShardBox& box : placements[i].boxes) {
      int64_t n = 1;
      for (int64_t e : box.extent) n *= e;
      box_values.resize(static_cast<size_t>(n));
      read_weight_box<T>(full, checkpoint, prefix + spec.name, placements[i].global_shape, box.global_offset, box.extent,
                         box_values.data());
      place_local_box(box_values.data(), spec.shape, box, w.values[i].data());
    }
    if (keep) keep(i, w.values[i]);
  }
  return w;
}

template <class T>
Weights<T> load_shard_weights(const std::string& dir, const ModelShard& shard) {
  const ModelConfig config = load_checkpoint_config(dir);
  (void)shard_config(config, shard);  // checks the split before reading anything
  if (config.variant != CheckpointVariant::qwen3_5_moe) return shard_weights(load_weights<T>(dir), shard);
  const SafetensorsCheckpoint checkpoint(dir);
  return read_shard_weights<T>(config, checkpoint, shard);
}

template Weights<float> shard_weights<float>(const Weights<float>&, const ModelShard&);
template Weights<float> load_shard_weights<float>(const std::string&, const ModelShard&);
template Weights<double> load_shard_weights<double>(const std::string&, const ModelShard&);
template Weights<double> shard_weights<double>(const Weights<double>&, const ModelShard&);
template Weights<float> read_shard_weights<float>(const ModelConfig&, const SafetensorsCheckpoint&,
                                                  const ModelShard&, const std::string&,
                                                  const std::function<void(size_t, std::vector<float>&)>&);
template Weights<double> read_shard_weights<double>(const ModelConfig&, const SafetensorsCheckpoint&,
                                                    const ModelShard&, const std::string&,
                                                    const std::function<void(size_t, std::vector<double>&)>&);

std::vector<PartialTensor> partial_gradients(const ModelConfig& c, const LayerTensors& l) {
  if (!l.attention) return {{l.gdn.norm}};
  std::vector<PartialTensor> out{{l.attn.q_norm}, {l.attn.k_norm}};
  if (c.shard.kv_replicas > 1) {
    const int64_t slot = c.shard.tp_rank / c.shard.kv_replicas, slots = c.shard.tp / c.shard.kv_replicas;
    out.push_back({l.attn.k, slot, slots});
    out.push_back({l.attn.v, slot, slots});
  }
  return out;
}

std::vector<TensorSpread> tensor_spreads(const ModelConfig& config, const ModelLayout& shard, const ModelLayout& full) {
  std::vector<TensorSpread> out(shard.tensors.size(), TensorSpread::replicated);
  for (size_t i = 0; i < out.size(); ++i)
    if (shard.tensors[i].numel() != full.tensors[i].numel()) out[i] = TensorSpread::tensor_split;
  const bool kv_copy = config.shard.tp_rank % config.shard.kv_replicas != 0;
  for (const LayerTensors& l : shard.layers) {
    for (int i : {l.moe.gate_up, l.moe.down}) out[static_cast<size_t>(i)] = TensorSpread::routed_experts;
    if (l.attention && kv_copy)
      for (int i : {l.attn.k, l.attn.v}) out[static_cast<size_t>(i)] = TensorSpread::kv_copy;
  }
  return out;
}

}  // namespace mlpt::ref
