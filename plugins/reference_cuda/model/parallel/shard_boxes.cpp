#include "model/parallel/shard_boxes.hpp"

#include <algorithm>

#include "mlpt/sdk/error.hpp"
#include "model/parallel/pipeline_stages.hpp"
#include "model/parallel/shard_weights.hpp"
#include "model/parallel/vocab_parallel.hpp"

namespace mlpt::ref {

namespace {

// Rows [begin, begin + count) of the local tensor are rows [global_row, ...) of the global one,
// every other dimension whole.
ShardBox rows(const std::vector<int64_t>& local_shape, int64_t begin, int64_t count, int64_t global_row) {
  ShardBox b{std::vector<int64_t>(local_shape.size(), 0), local_shape, std::vector<int64_t>(local_shape.size(), 0)};
  b.local_offset[0] = begin, b.extent[0] = count, b.global_offset[0] = global_row;
  return b;
}

// The whole local tensor, at `global_offset`.
ShardBox whole_at(const std::vector<int64_t>& local_shape, std::vector<int64_t> global_offset) {
  return ShardBox{std::vector<int64_t>(local_shape.size(), 0), local_shape, std::move(global_offset)};
}

}  // namespace

std::vector<ShardPlacement> shard_placements(const ModelConfig& f, const ModelLayout& local, const ModelShard& s) {
  const ModelLayout global = make_layout(f);
  if (global.tensors.size() != local.tensors.size())
    throw sdk::Error(MLPT_INTERNAL, "shard_placements: the shard's layout has another tensor count than the model's");
  std::vector<ShardPlacement> out(local.tensors.size());
  for (size_t i = 0; i < out.size(); ++i) {  // replicated unless said otherwise below
    out[i].global_shape = global.tensors[i].shape;
    out[i].boxes = {whole_at(local.tensors[i].shape, std::vector<int64_t>(local.tensors[i].shape.size(), 0))};
  }
  if (!s.sharded()) return out;
  const ModelConfig c = shard_config(f, s);
  const int64_t D = f.head_dim, dk = f.gdn_key_dim, dv = f.gdn_value_dim, kd = f.key_dim(), r = s.tp_rank;
  auto shape = [&](int t) { return local.tensors[static_cast<size_t>(t)].shape; };
  auto at_row = [&](int t, int64_t row) { out[static_cast<size_t>(t)].boxes = {rows(shape(t), 0, shape(t)[0], row)}; };
  auto at_column = [&](int t, int64_t column) { out[static_cast<size_t>(t)].boxes = {whole_at(shape(t), {0, column})}; };
  for (const LayerTensors& l : local.layers) {
    if (l.attention) {
      const int64_t h0 = r * c.num_heads, g0 = c.shard.first_kv_head(c.num_kv_heads);
      at_row(l.attn.q, h0 * 2 * D);
      at_row(l.attn.k, g0 * D);
      at_row(l.attn.v, g0 * D);
      at_column(l.attn.o, h0 * D);
    } else {
      const int64_t Hk = c.gdn_key_heads, k0 = r * Hk, Hv = c.gdn_value_heads, v0 = r * Hv;
      for (int t : {l.gdn.qkv, l.gdn.conv})  // q heads, k heads, v heads: three blocks of rows
        out[static_cast<size_t>(t)].boxes = {rows(shape(t), 0, Hk * dk, k0 * dk),
                                             rows(shape(t), Hk * dk, Hk * dk, kd + k0 * dk),
                                             rows(shape(t), 2 * Hk * dk, Hv * dv, 2 * kd + v0 * dv)};
      at_row(l.gdn.z, v0 * dv);
      at_row(l.gdn.b, v0);
      at_row(l.gdn.a, v0);
      at_row(l.gdn.a_log, v0);
      at_row(l.gdn.dt_bias, v0);
      at_column(l.gdn.out, v0 * dv);
    }
    // Experts [e0, e0 + El), each one's FFN columns [i0, i0 + Il): gate_up [E, 2I, H] holds the
    // gate rows then the up rows of each expert, so its shard is two boxes.
    const int64_t I = f.moe_intermediate, Il = c.moe_intermediate, i0 = s.etp == 1 ? 0 : r * Il, H = f.hidden_size;
    const int64_t El = f.num_experts / s.expert_blocks(), e0 = s.expert_block() * El;
    out[static_cast<size_t>(l.moe.gate_up)].boxes = {ShardBox{{0, 0, 0}, {El, Il, H}, {e0, i0, 0}},
                                                     ShardBox{{0, Il, 0}, {El, Il, H}, {e0, I + i0, 0}}};
    out[static_cast<size_t>(l.moe.down)].boxes = {whole_at(shape(l.moe.down), {e0, 0, i0})};
    const int64_t s0 = r * c.shared_intermediate;
    at_row(l.moe.shared_gate, s0);
    at_row(l.moe.shared_up, s0);
    at_column(l.moe.shared_down, s0);
  }
  const int64_t vocab_begin = vocab_range(f.vocab_size, s).begin;  // the embedding's and LM head's rows
  at_row(local.embed, vocab_begin);
  at_row(local.lm_head, vocab_begin);
  const std::vector<bool> held = stage_tensors(local, s);  // another pipeline stage's: no boxes
  for (size_t i = 0; i < out.size(); ++i)
    if (!held[i]) out[i].boxes.clear();
  return out;
}

namespace {

// Calls run(at, k, n) for every run of the box along the last dimension: n elements at element
// `at` of the tensor, which are elements [k · n, (k + 1) · n) of the compact box.
template <class Run>
void for_each_box_run(const std::vector<int64_t>& shape, const ShardBox& box, Run run) {
  const size_t nd = shape.size();
  if (nd == 0) return run(int64_t{0}, int64_t{0}, int64_t{1});
  std::vector<int64_t> stride(nd, 1);
  for (size_t d = nd - 1; d > 0; --d) stride[d - 1] = stride[d] * shape[d];
  int64_t outer = 1;
  for (size_t d = 0; d + 1 < nd; ++d) outer *= box.extent[d];
  const int64_t n = box.extent[nd - 1];
  for (int64_t o = 0; o < outer; ++o) {
    int64_t at = box.local_offset[nd - 1], rest = o;
    for (size_t d = nd - 1; d-- > 0;) {
      at += (box.local_offset[d] + rest % box.extent[d]) * stride[d];
      rest /= box.extent[d];
    }
    run(at, o, n);
  }
}

}  // namespace

template <class T>
void copy_local_box(const T* from, const std::vector<int64_t>& shape, const ShardBox& box, T* to) {
  for_each_box_run(shape, box, [&](int64_t at, int64_t k, int64_t n) { std::copy_n(from + at, n, to + k * n); });
}

template <class T>
void place_local_box(const T* from, const std::vector<int64_t>& shape, const ShardBox& box, T* to) {
  for_each_box_run(shape, box, [&](int64_t at, int64_t k, int64_t n) { std::copy_n(from + k * n, n, to + at); });
}

template void copy_local_box<float>(const float*, const std::vector<int64_t>&, const ShardBox&, float*);
template void copy_local_box<double>(const double*, const std::vector<int64_t>&, const ShardBox&, double*);
template void place_local_box<float>(const float*, const std::vector<int64_t>&, const ShardBox&, float*);
template void place_local_box<double>(const double*, const std::vector<int64_t>&, const ShardBox&, double*);

}  // namespace mlpt::ref
