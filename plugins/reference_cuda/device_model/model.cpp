// The decoder stack over the ops interface: embedding, layers (mixer + MoE with zero-centred
// pre-norms and bf16 residuals), final norm; and the backward recomputing each layer from its saved
// input. Every op is the backend's; this file is host logic and the order of calls.
#include "device_model/model.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <thread>

#include "device_model/staged_experts.hpp"
#include "device_model/vocab_head.hpp"
#include "model/parallel/pipeline_stages.hpp"
#include "model/parallel/shard_weights.hpp"
#include "model/parallel/vocab_parallel.hpp"
#include "mlpt/sdk/error.hpp"

namespace mlpt::ref::dev {

namespace {

constexpr double kL2Eps = 1e-6;  // §2.4.4, fixed

}  // namespace

struct GdnTape {
  Buffer qkv, z, a, b, conv, q, k, v, g, beta, o, y;
};
struct AttentionTape {
  Buffer qg, q_raw, k_raw, q, k, v, o, lse, gated;
};
struct MoeTape {
  Buffer logits, weights, experts, sg, su, sh, s_out, s_logit;
};

struct Workspace {
  // Forward state of the current layer (the backward's tape).
  Buffer x, xn, xn2, h, m;
  GdnTape gdn;
  AttentionTape attn;
  MoeTape moe;
  // Batch description on the device.
  Buffer tokens, offsets, positions, replay_all, record_all, replay_layer, conv_ptrs, state_ptrs, table,
      kv_lengths;
  // The embedding rows of the tokens on a vocabulary-parallel rank: its range's, −1 for the others'.
  Buffer embed_ids;
  // Backward buffers.
  Buffer dx, dxn, dtmp, b0, b1, b2, b3, b4, b5, f0, f1, f2, f3;
  // Tensor-parallel sums: fp32 copies of bf16 partial sums, and gradients set aside.
  Buffer tp_values, tp_earlier;
  // Whole routed rows another TP rank adds (expert tensor parallel 1), and their input gradient.
  Buffer routed_elsewhere;
  // Set while the backward recomputes a layer: only its tape is wanted, not its output.
  bool recomputing = false;
  // The residual stream (or its gradient) passed between pipeline stages, as fp32.
  Buffer stage_values;
};
void WorkspaceDeleter::operator()(Workspace* w) const {
  delete w;
}
WorkspacePtr make_workspace() {
  return WorkspacePtr(new Workspace());
}

bool is_fp32_tensor(const ModelLayout& layout, int i) {
  return layout.tensors[i].init != Init::normal;
}

DeviceWeights allocate_weights(Ops& ops, const ModelConfig& c, const ModelLayout& layout) {
  DeviceWeights d{c, layout, {}};
  for (size_t i = 0; i < d.layout.tensors.size(); ++i)
    d.tensors.emplace_back(ops, size_t(std::max<int64_t>(d.layout.tensors[i].numel(), 1)) *
                                    (is_fp32_tensor(d.layout, static_cast<int>(i)) ? 4 : 2));
  return d;
}

namespace {

// y = bf16(x), elementwise, over a few threads (a 1B model's tensors are ~1e9 values).
void round_to_bf16(const float* x, size_t n, bf16* y) {
  constexpr size_t kSlice = size_t(1) << 20;
  const size_t slices = (n + kSlice - 1) / kSlice;
  const size_t threads = std::min<size_t>({slices, std::max(1u, std::thread::hardware_concurrency()), 16});
  auto part = [&](size_t t) {
    for (size_t s = t; s < slices; s += threads)
      for (size_t i = s * kSlice, e = std::min(n, i + kSlice); i < e; ++i) y[i] = to_bf16(x[i]);
  };
  std::vector<std::thread> pool;
  for (size_t t = 1; t < threads; ++t) pool.emplace_back(part, t);
  part(0);
  for (auto& t : pool) t.join();
}

}  // namespace

DeviceWeights upload_weights(Ops& ops, const Weights<float>& w) {
  DeviceWeights d = allocate_weights(ops, w.config, w.layout);
  if (w.values.size() != d.layout.tensors.size())
    throw sdk::Error(MLPT_INTERNAL, "upload_weights: " + std::to_string(w.values.size()) +
                                        " tensors for a layout of " +
                                        std::to_string(d.layout.tensors.size()));
  // bf16 tensors are rounded on the host (to_bf16 rounds as the backends' to_bf16 op does) and sent
  // as bf16: half the bytes of fp32, one copy per tensor, no device staging.
  std::vector<bf16> rounded;
  for (size_t i = 0; i < w.values.size(); ++i) {
    const int64_t n = d.layout.tensors[i].numel();
    if (static_cast<int64_t>(w.values[i].size()) != n)
      throw sdk::Error(MLPT_INTERNAL, "upload_weights: tensor '" + d.layout.tensors[i].name + "' has " +
                                          std::to_string(w.values[i].size()) + " values, its shape " +
                                          std::to_string(n));
    if (!n) continue;
    if (is_fp32_tensor(d.layout, static_cast<int>(i))) {
      ops.to_device(d.tensors[i].get(), w.values[i].data(), size_t(n) * 4);
    } else {
      rounded.resize(size_t(n));
      round_to_bf16(w.values[i].data(), size_t(n), rounded.data());
      ops.to_device(d.tensors[i].get(), rounded.data(), size_t(n) * 2);
    }
  }
  return d;
}

void assign_tensor(Ops& ops, DeviceWeights& w, int i, const float* src, uint32_t* changed) {
  const int64_t n = w.layout.tensors[i].numel();
  const bool fp32 = is_fp32_tensor(w.layout, i);
  if (changed && fp32)
    ops.copy_marking(n, src, w.tensors[i].as<float>(), changed);
  else if (changed)
    ops.to_bf16_marking(n, src, w.tensors[i].as<bf16>(), changed);
  else if (fp32)
    ops.copy(w.tensors[i].get(), src, size_t(n) * 4);
  else
    ops.to_bf16(n, src, w.tensors[i].as<bf16>());
}

std::vector<float> download_tensor(Ops& ops, const DeviceWeights& w, int i) {
  const int64_t n = w.layout.tensors[i].numel();
  std::vector<float> out(static_cast<size_t>(n));
  if (!n) return out;
  if (is_fp32_tensor(w.layout, i)) {
    ops.to_host(out.data(), w.f(i), size_t(n) * 4);
    return out;
  }
  // Widened on the host (exactly, as the to_float op does): half the bytes over the bus and no
  // device scratch as large as the tensor.
  std::vector<bf16> bits(static_cast<size_t>(n));
  ops.to_host(bits.data(), w.bf(i), size_t(n) * 2);
  for (size_t k = 0; k < bits.size(); ++k) out[k] = to_float(bits[k]);
  return out;
}

DeviceSequenceState::DeviceSequenceState(Ops& ops, const ModelConfig& c)
    : conv(size_t(c.num_layers)), state(size_t(c.num_layers)) {
  for (int64_t l = 0; l < c.num_layers; ++l) {
    if (c.attention_layer[l]) continue;
    const size_t cb = size_t((c.conv_kernel - 1) * c.conv_dim()) * 2;
    const size_t sb = size_t(c.gdn_value_heads * c.gdn_key_dim * c.gdn_value_dim) * 4;
    conv[l].reserve(ops, std::max<size_t>(cb, 1));
    state[l].reserve(ops, std::max<size_t>(sb, 1));
    if (cb) ops.zero(conv[l].get(), cb);
    if (sb) ops.zero(state[l].get(), sb);
  }
}

void DeviceSequenceState::copy_recurrent_from(Ops& ops, const DeviceSequenceState& o) {
  for (size_t l = 0; l < conv.size(); ++l) {
    if (!o.state[l].get()) continue;
    ops.copy(conv[l].get(), o.conv[l].get(), o.conv[l].bytes());
    ops.copy(state[l].get(), o.state[l].get(), o.state[l].bytes());
  }
  length = o.length;
}

KvCache::KvCache(Ops& ops, const ModelConfig& c, int64_t blocks, int64_t bs)
    : block_size(bs), num_blocks(blocks), k(size_t(c.num_layers)), v(size_t(c.num_layers)) {
  const size_t per = size_t(bs * c.num_kv_heads * c.head_dim) * sizeof(bf16);  // one block of one pool
  for (int64_t l = 0; l < c.num_layers; ++l) {
    if (!c.attention_layer[l]) continue;
    k[l].reserve(ops, std::max<size_t>(per * size_t(blocks), 1));
    v[l].reserve(ops, std::max<size_t>(per * size_t(blocks), 1));
  }
}

size_t KvCache::bytes_per_block(const ModelConfig& c, int64_t block_size) {
  return size_t(2 * block_size * c.num_kv_heads * c.head_dim) * sizeof(bf16) *
         size_t(c.num_attention_layers());
}

namespace {

// What every layer of one call needs.
struct Call {
  Ops& ops;
  const DeviceWeights& w;
  const DeviceBatch& batch;
  Workspace& ws;
  int64_t N;
  int64_t S;
  const int64_t* offsets;    // device
  const int64_t* positions;  // device
  KvCache* kv;
  bool has_states;         // the segments continue sequence states (BatchPlan)
  int64_t max_blocks;      // the block table's row length (BatchPlan)
  Communicator* tensor;    // the tensor-parallel group, NULL for one rank
  Communicator* routed;    // the routed experts' group (host memory), NULL for one rank
  Communicator* sharers;   // the ranks of `routed` with this rank's rows (ModelParallel::row_sharers)
  Communicator* pipeline;  // the pipeline stages (the backend's memory), NULL for one stage
  StageLayers stage;       // the layers this rank runs (all of them with one stage)
  bool experts_dispatched() const { return routed && routed->size() > 1; }
  // Where this rank's dispatched routed rows go: `mine`, or (expert tensor parallel 1, TP rank > 0:
  // TP rank 0 adds those whole rows to the partial sums) a zeroed scratch of n values.
  bf16* routed_rows(bf16* mine, int64_t n) const {
    if (!w.config.shard.routed_rows_whole_on_tp_ranks() || w.config.shard.tp_rank == 0) return mine;
    bf16* scratch = take<bf16>(ops, ws.routed_elsewhere, n);
    ops.zero(scratch, size_t(n) * 2);
    return scratch;
  }
};

// The residual stream or its gradient ([N, H] bf16) to or from a neighbouring pipeline stage. The
// communicators carry floats: widened to fp32 and rounded back, which gives the same bf16 bits.
// With a StageBoundary the caller passes the message: the widened values are left in / read from it.
void send_to_stage(const Call& c, const bf16* values, int64_t n, int stage) {
  if (const StageBoundary* to_caller = c.batch.boundary) {
    if (!to_caller->output) throw sdk::Error(MLPT_INTERNAL, "pipeline stage boundary without an output buffer");
    c.ops.to_float(n, values, to_caller->output);
    return;
  }
  float* wide = take<float>(c.ops, c.ws.stage_values, n);
  c.ops.to_float(n, values, wide);
  c.pipeline->send(wide, size_t(n), stage);
}
void receive_from_stage(const Call& c, bf16* values, int64_t n, int stage) {
  if (const StageBoundary* from_caller = c.batch.boundary) {
    if (!from_caller->input) throw sdk::Error(MLPT_INTERNAL, "pipeline stage boundary without an input");
    c.ops.to_bf16(n, from_caller->input, values);
    return;
  }
  float* wide = take<float>(c.ops, c.ws.stage_values, n);
  c.pipeline->recv(wide, size_t(n), stage);
  c.ops.to_bf16(n, wide, values);
}

// Partial sums of this rank's heads or FFN columns summed over the tensor-parallel group, in
// place (one rank: nothing to do). bf16 values are summed in fp32 and rounded once.
void sum_over_tensor(const Call& c, float* values, int64_t n) {
  if (!c.tensor || c.tensor->size() == 1 || n == 0) return;
  c.tensor->all_reduce_sum(values, size_t(n));
}
void sum_over_tensor(const Call& c, bf16* values, int64_t n) {
  if (!c.tensor || c.tensor->size() == 1 || n == 0) return;
  float* wide = take<float>(c.ops, c.ws.tp_values, n);
  c.ops.to_float(n, values, wide);
  c.tensor->all_reduce_sum(wide, size_t(n));
  c.ops.to_bf16(n, wide, values);
}

// Gradients a shard's backward adds as partial sums over its tensor-parallel group
// (partial_gradients: per-head norms, replicated KV heads' weights) while they may already hold
// earlier micro-batches' totals: set aside and zeroed, and after the layer's backward the layer's
// share summed over the group and the earlier totals added back (model/model.cpp's
// PartialGradients, on the device).
class PartialGradients {
 public:
  PartialGradients(const Call& c, std::vector<Buffer>& grads, std::vector<PartialTensor> tensors)
      : c_(c), grads_(grads), tensors_(std::move(tensors)) {
    if (!c_.tensor || c_.tensor->size() == 1) tensors_.clear();
    int64_t total = 0;
    for (const PartialTensor& p : tensors_) total += numel(p.tensor);
    float* earlier = take<float>(c_.ops, c_.ws.tp_earlier, total);
    for (const PartialTensor& p : tensors_) {
      c_.ops.copy(earlier, grads_[p.tensor].get(), size_t(numel(p.tensor)) * 4);
      c_.ops.zero(grads_[p.tensor].get(), size_t(numel(p.tensor)) * 4);
      earlier += numel(p.tensor);
    }
  }
  void sum() {
    const float* earlier = c_.ws.tp_earlier.as<float>();
    for (const PartialTensor& p : tensors_) {
      const int64_t n = numel(p.tensor);
      float* g = grads_[p.tensor].as<float>();
      if (p.slots == 1) {
        sum_over_tensor(c_, g, n);
      } else {  // this rank's share at its slot, zeros (which add nothing) at the others
        float* padded = take<float>(c_.ops, c_.ws.tp_values, p.slots * n);
        c_.ops.zero(padded, size_t(p.slots * n) * 4);
        c_.ops.copy(padded + p.slot * n, g, size_t(n) * 4);
        sum_over_tensor(c_, padded, p.slots * n);
        c_.ops.copy(g, padded + p.slot * n, size_t(n) * 4);
      }
      c_.ops.add_inplace(n, earlier, g);
      earlier += n;
    }
  }

 private:
  int64_t numel(int i) const { return c_.w.layout.tensors[i].numel(); }
  const Call& c_;
  std::vector<Buffer>& grads_;
  std::vector<PartialTensor> tensors_;
};

void gdn_forward(const Call& c, int layer, const bf16* xn, bf16* out) {
  const ModelConfig& cf = c.w.config;
  const GdnTensors& L = c.w.layout.layers[layer].gdn;
  GdnTape& t = c.ws.gdn;
  const int64_t N = c.N, H = cf.hidden_size, C = cf.conv_dim(), kd = cf.key_dim(), vd = cf.value_dim();
  const int64_t Hk = cf.gdn_key_heads, Hv = cf.gdn_value_heads, dk = cf.gdn_key_dim, dv = cf.gdn_value_dim;
  bf16* qkv = take<bf16>(c.ops, t.qkv, N * C);
  bf16* z = take<bf16>(c.ops, t.z, N * vd);
  bf16* a = take<bf16>(c.ops, t.a, N * Hv);
  bf16* b = take<bf16>(c.ops, t.b, N * Hv);
  c.ops.linear_forward(N, C, H, xn, c.w.bf(L.qkv), qkv);
  c.ops.linear_forward(N, vd, H, xn, c.w.bf(L.z), z);
  c.ops.linear_forward(N, Hv, H, xn, c.w.bf(L.b), b);
  c.ops.linear_forward(N, Hv, H, xn, c.w.bf(L.a), a);

  // The segments' windows and states of this layer: staged for every layer before the first
  // (stage_state_pointers), so the layers upload nothing.
  bf16* const* conv_caches = c.has_states ? c.ws.conv_ptrs.as<bf16*>() + layer * c.S : nullptr;
  float* const* states = c.has_states ? c.ws.state_ptrs.as<float*>() + layer * c.S : nullptr;
  bf16* conv = take<bf16>(c.ops, t.conv, N * C);
  c.ops.causal_conv_silu_forward(C, cf.conv_kernel, c.offsets, c.S, N, qkv, c.w.f(L.conv), conv_caches, true,
                                 conv);
  float* q = take<float>(c.ops, t.q, N * kd);
  float* k = take<float>(c.ops, t.k, N * kd);
  bf16* v = take<bf16>(c.ops, t.v, N * vd);
  c.ops.l2norm_forward(N * Hk, Hk, dk, conv, C, kL2Eps, 1.0 / std::sqrt(double(dk)), q);
  c.ops.l2norm_forward(N * Hk, Hk, dk, conv + kd, C, kL2Eps, 1.0, k);
  c.ops.copy_rows(v, size_t(vd) * 2, conv + 2 * kd, size_t(C) * 2, size_t(vd) * 2, N);
  float* g = take<float>(c.ops, t.g, N * Hv);
  float* beta = take<float>(c.ops, t.beta, N * Hv);
  c.ops.gdn_gates_forward(N, Hv, a, b, c.w.f(L.a_log), c.w.f(L.dt_bias), g, beta);
  bf16* o = take<bf16>(c.ops, t.o, N * vd);
  const GdnShape shape{Hk, Hv, dk, dv};
  if (c.batch.chunked)
    c.ops.gdn_chunked_forward(shape, c.offsets, c.S, q, k, v, g, beta, states, o);
  else
    c.ops.gdn_recurrent_forward(shape, c.offsets, c.S, q, k, v, g, beta, states, o);
  bf16* y = take<bf16>(c.ops, t.y, N * vd);
  c.ops.gated_rmsnorm_forward(N * Hv, dv, o, z, c.w.f(L.norm), cf.rms_norm_eps, y);
  c.ops.linear_forward(N, H, vd, y, c.w.bf(L.out), out);
}

void attention_forward_layer(const Call& c, int layer, const bf16* xn, bf16* out) {
  const ModelConfig& cf = c.w.config;
  const AttentionTensors& L = c.w.layout.layers[layer].attn;
  AttentionTape& t = c.ws.attn;
  const int64_t N = c.N, H = cf.hidden_size, nh = cf.num_heads, nkv = cf.num_kv_heads, D = cf.head_dim;
  bf16* qg = take<bf16>(c.ops, t.qg, N * nh * 2 * D);
  bf16* k_raw = take<bf16>(c.ops, t.k_raw, N * nkv * D);
  bf16* v = take<bf16>(c.ops, t.v, N * nkv * D);
  c.ops.linear_forward(N, nh * 2 * D, H, xn, c.w.bf(L.q), qg);
  c.ops.linear_forward(N, nkv * D, H, xn, c.w.bf(L.k), k_raw);
  c.ops.linear_forward(N, nkv * D, H, xn, c.w.bf(L.v), v);
  bf16* q_raw = take<bf16>(c.ops, t.q_raw, N * nh * D);
  c.ops.copy_rows(q_raw, size_t(D) * 2, qg, size_t(2 * D) * 2, size_t(D) * 2, N * nh);
  bf16* q = take<bf16>(c.ops, t.q, N * nh * D);
  bf16* k = take<bf16>(c.ops, t.k, N * nkv * D);
  c.ops.rmsnorm_forward(N * nh, D, q_raw, c.w.f(L.q_norm), cf.rms_norm_eps, q);
  c.ops.rmsnorm_forward(N * nkv, D, k_raw, c.w.f(L.k_norm), cf.rms_norm_eps, k);
  c.ops.rope_forward(N, nh, D, cf.rotary_dim, cf.rope_theta, c.positions, q);
  c.ops.rope_forward(N, nkv, D, cf.rotary_dim, cf.rope_theta, c.positions, k);
  bf16* o = take<bf16>(c.ops, t.o, N * nh * D);
  const AttentionShape shape{nh, nkv, D};
  if (!c.has_states) {
    float* lse = take<float>(c.ops, t.lse, N * nh);
    c.ops.attention_forward(shape, c.offsets, c.offsets, c.S, N, q, k, v, o, lse);
  } else {
    bf16* kp = c.kv->k[layer].as<bf16>();
    bf16* vp = c.kv->v[layer].as<bf16>();
    const int32_t* table = c.ws.table.as<int32_t>();
    const int64_t* lengths = c.ws.kv_lengths.as<int64_t>();
    c.ops.paged_kv_write(shape, c.offsets, lengths, c.S, N, k, v, kp, vp, table, c.max_blocks,
                         c.kv->block_size);
    c.ops.attention_forward_paged(shape, c.offsets, lengths, c.S, N, q, kp, vp, table, c.max_blocks,
                                  c.kv->block_size, o);
  }
  bf16* gated = take<bf16>(c.ops, t.gated, N * nh * D);
  c.ops.sigmoid_gate_forward(N * nh, D, o, D, qg + D, 2 * D, gated);
  c.ops.linear_forward(N, H, nh * D, gated, c.w.bf(L.o), out);
}

MoeShape moe_shape(const ModelConfig& c) {
  return {c.hidden_size, c.num_experts, c.experts_per_token, c.moe_intermediate, c.norm_topk_prob};
}

void moe_forward(const Call& c, int layer, const bf16* xn, bf16* out) {
  const ModelConfig& cf = c.w.config;
  const MoeTensors& L = c.w.layout.layers[layer].moe;
  MoeTape& t = c.ws.moe;
  const int64_t N = c.N, H = cf.hidden_size, E = cf.num_experts, k = cf.experts_per_token, Lc = cf.num_layers;
  const int64_t Is = cf.shared_intermediate;
  float* logits = take<float>(c.ops, t.logits, N * E);
  c.ops.logits_forward(N, E, H, xn, c.w.bf(L.router), logits);  // fp32 router logits (§7)
  int16_t* experts = take<int16_t>(c.ops, t.experts, N * k);
  float* weights = take<float>(c.ops, t.weights, N * k);
  const int16_t* replay = nullptr;
  if (c.batch.replay_experts) {
    int16_t* r = take<int16_t>(c.ops, c.ws.replay_layer, N * k);
    c.ops.copy_rows(r, size_t(k) * 2, c.ws.replay_all.as<int16_t>() + layer * k, size_t(Lc * k) * 2,
                    size_t(k) * 2, N);
    replay = r;
  }
  const MoeShape shape = moe_shape(cf);
  c.ops.route(shape, N, logits, replay, experts, weights, nullptr);
  if (c.batch.routed_experts)
    c.ops.copy_rows(c.ws.record_all.as<int16_t>() + layer * k, size_t(Lc * k) * 2, experts, size_t(k) * 2,
                    size_t(k) * 2, N);
  c.ops.zero(out, size_t(N * H) * 2);
  // The backward's recomputation needs the routing and the shared expert's tape, not the routed
  // experts' output (experts_backward recomputes what it needs): skipped, with its host round trip.
  if (!c.ws.recomputing) {
    if (c.experts_dispatched())
      staged_experts_forward(c.ops, *c.routed, c.sharers, shape, N, xn, experts, weights, c.w.bf(L.gate_up),
                             c.w.bf(L.down), c.routed_rows(out, N * H));
    else
      c.ops.experts_forward(shape, N, xn, experts, weights, c.w.bf(L.gate_up), c.w.bf(L.down), out);
  }
  bf16* sg = take<bf16>(c.ops, t.sg, N * Is);
  bf16* su = take<bf16>(c.ops, t.su, N * Is);
  bf16* sh = take<bf16>(c.ops, t.sh, N * Is);
  bf16* s_out = take<bf16>(c.ops, t.s_out, N * H);
  bf16* s_logit = take<bf16>(c.ops, t.s_logit, N);
  c.ops.linear_forward(N, Is, H, xn, c.w.bf(L.shared_gate), sg);
  c.ops.linear_forward(N, Is, H, xn, c.w.bf(L.shared_up), su);
  c.ops.linear_forward(N, 1, H, xn, c.w.bf(L.shared_expert_gate), s_logit);
  c.ops.swiglu_forward(N, Is, sg, su, Is, sh);
  c.ops.linear_forward(N, H, Is, sh, c.w.bf(L.shared_down), s_out);
  c.ops.scaled_add_forward(N, H, s_logit, s_out, out);
}

// x ← x + mixer(norm1(x)); h = x; x ← x + moe(norm2(x)). Leaves the layer's tape in the workspace.
void layer_forward(const Call& c, int layer, bf16* x) {
  const ModelConfig& cf = c.w.config;
  const LayerTensors& L = c.w.layout.layers[layer];
  const int64_t n = c.N * cf.hidden_size;
  bf16* xn = take<bf16>(c.ops, c.ws.xn, n);
  bf16* m = take<bf16>(c.ops, c.ws.m, n);
  c.ops.rmsnorm_forward(c.N, cf.hidden_size, x, c.w.f(L.input_norm), cf.rms_norm_eps, xn);
  if (L.attention)
    attention_forward_layer(c, layer, xn, m);
  else
    gdn_forward(c, layer, xn, m);
  sum_over_tensor(c, m, n);  // this rank's heads' share
  c.ops.add_inplace(n, m, x);
  bf16* h = take<bf16>(c.ops, c.ws.h, n);
  c.ops.copy(h, x, size_t(n) * 2);
  bf16* xn2 = take<bf16>(c.ops, c.ws.xn2, n);
  c.ops.rmsnorm_forward(c.N, cf.hidden_size, x, c.w.f(L.post_norm), cf.rms_norm_eps, xn2);
  moe_forward(c, layer, xn2, m);
  sum_over_tensor(c, m, n);  // this rank's FFN columns' share
  c.ops.add_inplace(n, m, x);
}

// Every layer's conv window and GDN state pointers of the batch's segments, [layers, S] each, in
// two uploads (attention layers' entries NULL).
void stage_state_pointers(Ops& ops, const ModelConfig& c, const DeviceBatch& b, Workspace& ws) {
  const size_t S = b.states.size(), L = size_t(c.num_layers);
  std::vector<bf16*> cp(L * S, nullptr);
  std::vector<float*> sp(L * S, nullptr);
  for (size_t l = 0; l < L; ++l)
    for (size_t s = 0; s < S; ++s) {
      DeviceSequenceState* st = b.states[s];
      if (!st || l >= st->conv.size()) continue;
      cp[l * S + s] = st->conv[l].as<bf16>();
      sp[l * S + s] = st->state[l].as<float>();
    }
  upload(ops, ws.conv_ptrs, cp);
  upload(ops, ws.state_ptrs, sp);
}

// Whether this shard's embedding and LM head hold a range of the vocabulary (vocab_head.hpp).
bool vocab_split(const ModelConfig& c) {
  return vocab_range(c.vocab_size, c.shard).count() < c.vocab_size;
}

// The tokens' rows of this rank's embedding: the ids themselves, or their places in its range.
const int32_t* embedding_ids(const Call& c) {
  return (vocab_split(c.w.config) ? c.ws.embed_ids : c.ws.tokens).as<int32_t>();
}

// x = the tokens' embedding rows; a vocabulary-parallel rank has its range's rows (zeros for the
// others' ids) and the TP sum completes them, exactly (one rank's row plus zeros).
void embed(const Call& c, bf16* x) {
  const ModelConfig& cf = c.w.config;
  c.ops.embedding_forward(c.N, cf.hidden_size, embedding_ids(c), c.w.bf(c.w.layout.embed), x);
  if (vocab_split(cf)) sum_over_tensor(c, x, c.N * cf.hidden_size);
}

// Puts the batch's plan on the device.
Call prepare(Ops& ops, const DeviceWeights& w, const DeviceBatch& b, Workspace& ws) {
  const ModelConfig& c = w.config;
  check_groups(c.shard, b.parallel);
  BatchPlan plan = plan_batch(c, b);
  const int64_t N = b.num_tokens(), S = static_cast<int64_t>(b.num_segments());
  const int64_t k = c.experts_per_token, Lc = c.num_layers;
  if (plan.has_states) {
    upload(ops, ws.table, plan.block_table);
    upload(ops, ws.kv_lengths, plan.kv_lengths);
    stage_state_pointers(ops, c, b, ws);
  }
  if (b.replay_experts) {
    int16_t* r = take<int16_t>(ops, ws.replay_all, N * Lc * k);
    if (N * Lc * k > 0) ops.to_device(r, b.replay_experts, size_t(N * Lc * k) * 2);
  }
  if (b.routed_experts) {
    int16_t* record = take<int16_t>(ops, ws.record_all, N * Lc * k);
    // A pipeline stage records its own layers' experts: the other layers' read expert 0.
    if (c.shard.pp > 1) ops.zero(record, size_t(N * Lc * k) * 2);
  }
  upload(ops, ws.tokens, b.tokens);
  if (vocab_split(c)) upload(ops, ws.embed_ids, vocab_local_ids(vocab_range(c.vocab_size, c.shard), b.tokens));
  const int64_t* offsets = upload(ops, ws.offsets, b.offsets);
  const int64_t* positions = upload(ops, ws.positions, plan.positions);
  return Call{ops,
              w,
              b,
              ws,
              N,
              S,
              offsets,
              positions,
              b.kv,
              plan.has_states,
              plan.max_blocks,
              b.parallel ? b.parallel->tensor : nullptr,
              b.parallel ? b.parallel->routed_group() : nullptr,
              b.parallel ? b.parallel->row_sharers() : nullptr,
              b.parallel && b.parallel->pipeline_size() > 1 ? b.parallel->pipeline : nullptr,
              stage_layers(Lc, c.shard)};
}

}  // namespace

BatchPlan plan_batch(const ModelConfig& c, const DeviceBatch& b) {
  if (b.offsets.empty() || b.offsets[0] != 0)
    throw sdk::Error(MLPT_INVALID_ARGUMENT, "forward: offsets must start at 0");
  const int64_t S = static_cast<int64_t>(b.num_segments());
  for (int64_t s = 0; s < S; ++s)
    if (b.offsets[s + 1] < b.offsets[s])
      throw sdk::Error(MLPT_INVALID_ARGUMENT, "forward: offsets decrease at segment " + std::to_string(s));
  const int64_t N = b.num_tokens();
  if (static_cast<int64_t>(b.tokens.size()) != N)
    throw sdk::Error(MLPT_INTERNAL, "forward: " + std::to_string(b.tokens.size()) +
                                        " tokens for offsets ending at " + std::to_string(N));
  for (int64_t t = 0; t < N; ++t)
    if (b.tokens[t] < 0 || b.tokens[t] >= c.vocab_size)
      throw sdk::Error(MLPT_INVALID_ARGUMENT, "token " + std::to_string(b.tokens[t]) + " at position " +
                                                  std::to_string(t) + " is outside the vocabulary [0, " +
                                                  std::to_string(c.vocab_size) + ")");
  const int64_t k = c.experts_per_token, Lc = c.num_layers;
  if (b.replay_experts)
    for (int64_t i = 0; i < N * Lc * k; ++i)
      if (b.replay_experts[i] < 0 || b.replay_experts[i] >= c.num_experts)
        throw sdk::Error(MLPT_INVALID_ARGUMENT, "routed_experts: layer " + std::to_string((i / k) % Lc) +
                                                    ", token " + std::to_string(i / (k * Lc)) + ": expert " +
                                                    std::to_string(b.replay_experts[i]) + " is outside [0, " +
                                                    std::to_string(c.num_experts) + ")");
  if (!b.states.empty() && static_cast<int64_t>(b.states.size()) != S)
    throw sdk::Error(MLPT_INTERNAL, "forward: states must be empty or one per segment");
  BatchPlan plan;
  for (auto* st : b.states) plan.has_states |= st != nullptr;
  if (plan.has_states) {
    if (!b.kv) throw sdk::Error(MLPT_INTERNAL, "forward: sequence states need a KV cache");
    plan.max_blocks = 1;
    plan.kv_lengths.resize(static_cast<size_t>(S));
    for (int64_t s = 0; s < S; ++s) {
      const DeviceSequenceState* st = b.states[s];
      if (!st)
        throw sdk::Error(MLPT_INTERNAL, "forward: with states, every segment needs one (segment " +
                                            std::to_string(s) + " has none)");
      plan.kv_lengths[s] = st->length + (b.offsets[s + 1] - b.offsets[s]);
      if (static_cast<int64_t>(st->blocks.size()) * b.kv->block_size < plan.kv_lengths[s])
        throw sdk::Error(MLPT_INTERNAL, "forward: segment " + std::to_string(s) + " has KV blocks for " +
                                            std::to_string(st->blocks.size() * b.kv->block_size) +
                                            " tokens, needs " + std::to_string(plan.kv_lengths[s]));
      for (int32_t blk : st->blocks)
        if (blk < 0 || blk >= b.kv->num_blocks)
          throw sdk::Error(MLPT_INTERNAL, "forward: segment " + std::to_string(s) + " names KV block " +
                                              std::to_string(blk) + " of a pool of " +
                                              std::to_string(b.kv->num_blocks));
      plan.max_blocks = std::max<int64_t>(plan.max_blocks, static_cast<int64_t>(st->blocks.size()));
    }
    plan.max_blocks = std::max(plan.max_blocks, b.table_width);
    plan.block_table.assign(size_t(S * plan.max_blocks), 0);
    for (int64_t s = 0; s < S; ++s)
      std::copy(b.states[s]->blocks.begin(), b.states[s]->blocks.end(),
                plan.block_table.begin() + s * plan.max_blocks);
  }
  plan.positions.resize(static_cast<size_t>(N));
  for (int64_t s = 0; s < S; ++s) {
    const int64_t base = plan.has_states ? b.states[s]->length : 0;
    for (int64_t t = b.offsets[s]; t < b.offsets[s + 1]; ++t) plan.positions[t] = base + (t - b.offsets[s]);
  }
  return plan;
}

void forward_hidden(Ops& ops, const DeviceWeights& w, const DeviceBatch& b, Workspace& ws, Buffer& hidden,
                    Buffer* layer_inputs, LayerTrace* trace) {
  const ModelConfig& c = w.config;
  Call call = prepare(ops, w, b, ws);
  const int64_t N = call.N, H = c.hidden_size, Lc = c.num_layers, k = c.experts_per_token;
  const StageLayers stage = call.stage;
  bf16* x = take<bf16>(ops, ws.x, N * H);
  if (c.shard.first_stage())
    embed(call, x);
  else
    receive_from_stage(call, x, N * H, c.shard.pp_rank - 1);
  bf16* saved = layer_inputs ? take<bf16>(ops, *layer_inputs, (stage.count() + 1) * N * H) : nullptr;
  if (trace) trace->residual.assign(size_t((Lc + 1) * N * H), 0.f);
  std::vector<bf16> row(trace ? size_t(N * H) : 0);
  auto tap = [&](int64_t l) {  // residual stream after layer l - 1 (l = 0: the embedding)
    if (saved) ops.copy(saved + (l - stage.first) * N * H, x, size_t(N * H) * 2);
    if (!trace || N * H == 0) return;
    ops.to_host(row.data(), x, size_t(N * H) * 2);
    for (int64_t i = 0; i < N * H; ++i) trace->residual[size_t(l * N * H + i)] = to_float(row[size_t(i)]);
  };
  for (int64_t l = stage.first; l < stage.end; ++l) {
    tap(l);
    layer_forward(call, static_cast<int>(l), x);
  }
  tap(stage.end);
  if (c.shard.last_stage()) {
    bf16* out = take<bf16>(ops, hidden, N * H);
    ops.rmsnorm_forward(N, H, x, w.f(w.layout.final_norm), c.rms_norm_eps, out);
  } else {
    send_to_stage(call, x, N * H, c.shard.pp_rank + 1);
  }
  if (b.routed_experts && N * Lc * k > 0)
    ops.to_host(b.routed_experts, ws.record_all.get(), size_t(N * Lc * k) * 2);
  ops.synchronize();
  for (size_t s = 0; s < b.num_segments(); ++s)
    if (!b.states.empty() && b.states[s]) b.states[s]->length += b.offsets[s + 1] - b.offsets[s];
}

void stage_forward(Ops& ops, const DeviceWeights& w, const DeviceBatch& b, Workspace& ws) {
  forward_staged(ops, w, b, ws, nullptr, nullptr);
}

void forward_staged(Ops& ops, const DeviceWeights& w, const DeviceBatch& b, Workspace& ws, Buffer* hidden,
                    const std::function<void()>& staged) {
  const ModelConfig& c = w.config;
  if (b.parallel)
    throw sdk::Error(MLPT_INTERNAL, "forward_staged: one rank only (its sums and dispatch involve the host)");
  Call call = prepare(ops, w, b, ws);
  if (!hidden) return;
  if (staged) staged();
  const int64_t N = call.N, H = c.hidden_size;
  bf16* x = take<bf16>(ops, ws.x, N * H);
  embed(call, x);
  for (int64_t l = 0; l < c.num_layers; ++l) layer_forward(call, static_cast<int>(l), x);
  ops.rmsnorm_forward(N, H, x, w.f(w.layout.final_norm), c.rms_norm_eps, take<bf16>(ops, *hidden, N * H));
}

const int16_t* routing_record(const Workspace& ws) {
  return ws.record_all.as<int16_t>();
}

namespace {

void gdn_backward_layer(const Call& c, int layer, const bf16* xn, const bf16* dout, bf16* dxn,
                        std::vector<Buffer>& grads) {
  Ops& ops = c.ops;
  const ModelConfig& cf = c.w.config;
  const GdnTensors& L = c.w.layout.layers[layer].gdn;
  GdnTape& t = c.ws.gdn;
  Workspace& ws = c.ws;
  const int64_t N = c.N, H = cf.hidden_size, C = cf.conv_dim(), kd = cf.key_dim(), vd = cf.value_dim();
  const int64_t Hk = cf.gdn_key_heads, Hv = cf.gdn_value_heads, dk = cf.gdn_key_dim, dv = cf.gdn_value_dim;
  auto G = [&](int i) { return grads[i].as<float>(); };
  bf16* dy = take<bf16>(ops, ws.b0, N * vd);
  c.ops.linear_backward_input(N, H, vd, dout, c.w.bf(L.out), dy, false);
  c.ops.linear_backward_weight(N, H, vd, dout, t.y.as<bf16>(), G(L.out));
  bf16* d_o = take<bf16>(ops, ws.b1, N * vd);
  bf16* dz = take<bf16>(ops, ws.b2, N * vd);
  c.ops.gated_rmsnorm_backward(N * Hv, dv, t.o.as<bf16>(), t.z.as<bf16>(), c.w.f(L.norm), cf.rms_norm_eps, dy,
                               d_o, dz, G(L.norm));
  float* dq = take<float>(ops, ws.f0, N * kd);
  float* dk_ = take<float>(ops, ws.f1, N * kd);
  float* dg = take<float>(ops, ws.f2, N * Hv);
  float* dbeta = take<float>(ops, ws.f3, N * Hv);
  bf16* dv_ = take<bf16>(ops, ws.b3, N * vd);
  const GdnShape shape{Hk, Hv, dk, dv};
  c.ops.gdn_backward(shape, c.offsets, c.batch.offsets.data(), c.S, t.q.as<float>(), t.k.as<float>(),
                     t.v.as<bf16>(), t.g.as<float>(), t.beta.as<float>(), d_o, dq, dk_, dv_, dg, dbeta);
  bf16* da = take<bf16>(ops, ws.b4, N * Hv);
  bf16* db = take<bf16>(ops, ws.b5, N * Hv);
  c.ops.gdn_gates_backward(N, Hv, t.a.as<bf16>(), t.b.as<bf16>(), c.w.f(L.a_log), c.w.f(L.dt_bias), dg, dbeta,
                           da, db, G(L.a_log), G(L.dt_bias));
  bf16* dconv = take<bf16>(ops, ws.b0, N * C);  // dy is no longer needed
  const bf16* conv = t.conv.as<bf16>();
  c.ops.l2norm_backward(N * Hk, Hk, dk, conv, C, kL2Eps, 1.0 / std::sqrt(double(dk)), dq, dconv, C);
  c.ops.l2norm_backward(N * Hk, Hk, dk, conv + kd, C, kL2Eps, 1.0, dk_, dconv + kd, C);
  c.ops.copy_rows(dconv + 2 * kd, size_t(C) * 2, dv_, size_t(vd) * 2, size_t(vd) * 2, N);
  bf16* dqkv = take<bf16>(ops, ws.b1, N * C);  // d_o is no longer needed
  c.ops.causal_conv_silu_backward(C, cf.conv_kernel, c.offsets, c.S, N, t.qkv.as<bf16>(), c.w.f(L.conv),
                                  dconv, dqkv, G(L.conv));
  c.ops.linear_backward_input(N, C, H, dqkv, c.w.bf(L.qkv), dxn, false);
  c.ops.linear_backward_input(N, vd, H, dz, c.w.bf(L.z), dxn, true);
  c.ops.linear_backward_input(N, Hv, H, db, c.w.bf(L.b), dxn, true);
  c.ops.linear_backward_input(N, Hv, H, da, c.w.bf(L.a), dxn, true);
  c.ops.linear_backward_weight(N, C, H, dqkv, xn, G(L.qkv));
  c.ops.linear_backward_weight(N, vd, H, dz, xn, G(L.z));
  c.ops.linear_backward_weight(N, Hv, H, db, xn, G(L.b));
  c.ops.linear_backward_weight(N, Hv, H, da, xn, G(L.a));
}

void attention_backward_layer(const Call& c, int layer, const bf16* xn, const bf16* dout, bf16* dxn,
                              std::vector<Buffer>& grads) {
  Ops& ops = c.ops;
  const ModelConfig& cf = c.w.config;
  const AttentionTensors& L = c.w.layout.layers[layer].attn;
  AttentionTape& t = c.ws.attn;
  Workspace& ws = c.ws;
  const int64_t N = c.N, H = cf.hidden_size, nh = cf.num_heads, nkv = cf.num_kv_heads, D = cf.head_dim;
  auto G = [&](int i) { return grads[i].as<float>(); };
  bf16* dgated = take<bf16>(ops, ws.b0, N * nh * D);
  c.ops.linear_backward_input(N, H, nh * D, dout, c.w.bf(L.o), dgated, false);
  c.ops.linear_backward_weight(N, H, nh * D, dout, t.gated.as<bf16>(), G(L.o));
  bf16* d_o = take<bf16>(ops, ws.b1, N * nh * D);
  bf16* dqg = take<bf16>(ops, ws.b2, N * nh * 2 * D);
  c.ops.sigmoid_gate_backward(N * nh, D, t.o.as<bf16>(), D, t.qg.as<bf16>() + D, 2 * D, dgated, d_o, D,
                              dqg + D, 2 * D);
  bf16* dq = take<bf16>(ops, ws.b3, N * nh * D);
  bf16* dk = take<bf16>(ops, ws.b4, N * nkv * D);
  bf16* dv = take<bf16>(ops, ws.b5, N * nkv * D);
  const AttentionShape shape{nh, nkv, D};
  c.ops.attention_backward(shape, c.offsets, c.offsets, c.S, N, N, t.q.as<bf16>(), t.k.as<bf16>(),
                           t.v.as<bf16>(), t.o.as<bf16>(), t.lse.as<float>(), d_o, dq, dk, dv);
  c.ops.rope_backward(N, nh, D, cf.rotary_dim, cf.rope_theta, c.positions, dq);
  c.ops.rope_backward(N, nkv, D, cf.rotary_dim, cf.rope_theta, c.positions, dk);
  bf16* dq_raw = take<bf16>(ops, ws.b0, N * nh * D);   // dgated is no longer needed
  bf16* dk_raw = take<bf16>(ops, ws.b1, N * nkv * D);  // neither is d_o
  c.ops.rmsnorm_backward(N * nh, D, t.q_raw.as<bf16>(), c.w.f(L.q_norm), cf.rms_norm_eps, dq, dq_raw,
                         G(L.q_norm));
  c.ops.rmsnorm_backward(N * nkv, D, t.k_raw.as<bf16>(), c.w.f(L.k_norm), cf.rms_norm_eps, dk, dk_raw,
                         G(L.k_norm));
  c.ops.copy_rows(dqg, size_t(2 * D) * 2, dq_raw, size_t(D) * 2, size_t(D) * 2, N * nh);
  c.ops.linear_backward_input(N, nh * 2 * D, H, dqg, c.w.bf(L.q), dxn, false);
  c.ops.linear_backward_input(N, nkv * D, H, dk_raw, c.w.bf(L.k), dxn, true);
  c.ops.linear_backward_input(N, nkv * D, H, dv, c.w.bf(L.v), dxn, true);
  c.ops.linear_backward_weight(N, nh * 2 * D, H, dqg, xn, G(L.q));
  c.ops.linear_backward_weight(N, nkv * D, H, dk_raw, xn, G(L.k));
  c.ops.linear_backward_weight(N, nkv * D, H, dv, xn, G(L.v));
}

void moe_backward_layer(const Call& c, int layer, const bf16* xn, const bf16* dout, bf16* dxn,
                        std::vector<Buffer>& grads, bool router_grad) {
  Ops& ops = c.ops;
  const ModelConfig& cf = c.w.config;
  const MoeTensors& L = c.w.layout.layers[layer].moe;
  MoeTape& t = c.ws.moe;
  Workspace& ws = c.ws;
  const int64_t N = c.N, H = cf.hidden_size, E = cf.num_experts, k = cf.experts_per_token;
  const int64_t Is = cf.shared_intermediate;
  auto G = [&](int i) { return grads[i].as<float>(); };
  // On a tensor-parallel shard the shared expert's (and with etp = tp every routed expert's) FFN
  // columns are this rank's: their contributions to dxn, dlogit and dweights are partial sums,
  // summed over the group before the replicated shared expert gate and router add theirs (once, on
  // every rank alike). Whole routed rows (etp = 1) count on TP rank 0 only.
  bf16* dlogit = take<bf16>(ops, ws.b0, N);
  bf16* dS = take<bf16>(ops, ws.b1, N * H);
  c.ops.scaled_add_backward(N, H, t.s_logit.as<bf16>(), t.s_out.as<bf16>(), dout, dlogit, dS);
  sum_over_tensor(c, dlogit, N);  // <dout, s_out> needs the whole shared output
  bf16* dsh = take<bf16>(ops, ws.b2, N * Is);
  c.ops.linear_backward_input(N, H, Is, dS, c.w.bf(L.shared_down), dsh, false);
  c.ops.linear_backward_weight(N, H, Is, dS, t.sh.as<bf16>(), G(L.shared_down));
  bf16* dsg = take<bf16>(ops, ws.b3, N * Is);
  bf16* dsu = take<bf16>(ops, ws.b4, N * Is);
  c.ops.swiglu_backward(N, Is, t.sg.as<bf16>(), t.su.as<bf16>(), Is, dsh, dsg, dsu, Is);
  c.ops.linear_backward_input(N, Is, H, dsg, c.w.bf(L.shared_gate), dxn, false);
  c.ops.linear_backward_input(N, Is, H, dsu, c.w.bf(L.shared_up), dxn, true);
  c.ops.linear_backward_weight(N, Is, H, dsg, xn, G(L.shared_gate));
  c.ops.linear_backward_weight(N, Is, H, dsu, xn, G(L.shared_up));

  const MoeShape shape = moe_shape(cf);
  float* dweights = take<float>(ops, ws.f0, N * k);
  if (c.experts_dispatched()) {
    bf16* dx = c.routed_rows(dxn, N * H);
    staged_experts_backward(c.ops, *c.routed, c.sharers, shape, N, xn, t.experts.as<int16_t>(),
                            t.weights.as<float>(), c.w.bf(L.gate_up), c.w.bf(L.down), dout, dx, dweights,
                            G(L.gate_up), G(L.down));
    if (dx != dxn) c.ops.zero(dweights, size_t(N * k) * 4);  // TP rank 0 adds the whole rows' share
  } else
    c.ops.experts_backward(shape, N, xn, t.experts.as<int16_t>(), t.weights.as<float>(), c.w.bf(L.gate_up),
                           c.w.bf(L.down), dout, dxn, true, dweights, G(L.gate_up), G(L.down));
  sum_over_tensor(c, dweights, N * k);
  sum_over_tensor(c, dxn, N * H);

  // The replicated parts: the shared expert gate, then the router through the gating weights.
  c.ops.linear_backward_input(N, 1, H, dlogit, c.w.bf(L.shared_expert_gate), dxn, true);
  c.ops.linear_backward_weight(N, 1, H, dlogit, xn, G(L.shared_expert_gate));
  float* dlogits = take<float>(ops, ws.f1, N * E);
  c.ops.route_backward(shape, N, t.logits.as<float>(), t.experts.as<int16_t>(), t.weights.as<float>(),
                       dweights, dlogits);
  bf16* dl = take<bf16>(ops, ws.b5, N * E);
  c.ops.to_bf16(N * E, dlogits, dl);
  c.ops.linear_backward_input(N, E, H, dl, c.w.bf(L.router), dxn, true);
  if (router_grad) c.ops.linear_backward_weight(N, E, H, dl, xn, G(L.router));
}

}  // namespace

void backward(Ops& ops, const DeviceWeights& w, const DeviceBatch& b, const Buffer& layer_inputs,
              const int16_t* experts, const bf16* d_hidden, std::vector<Buffer>& grads, bool router_grad,
              Workspace& ws) {
  const ModelConfig& c = w.config;
  for (auto* st : b.states)
    if (st)
      throw sdk::Error(MLPT_INTERNAL, "backward: batches with generation states are not differentiable");
  DeviceBatch replayed = b;  // recompute each layer with the routing the forward used
  replayed.replay_experts = experts;
  replayed.routed_experts = nullptr;
  Call call = prepare(ops, w, replayed, ws);
  struct Recomputing {  // reset however the backward ends
    Workspace& ws;
    explicit Recomputing(Workspace& w) : ws(w) { ws.recomputing = true; }
    ~Recomputing() { ws.recomputing = false; }
  } recomputing(ws);
  const int64_t N = call.N, H = c.hidden_size;
  const StageLayers stage = call.stage;
  if (layer_inputs.bytes() < size_t((stage.count() + 1) * N * H) * 2)
    throw sdk::Error(MLPT_INTERNAL, "backward: layer_inputs do not match the batch");
  const bf16* saved = layer_inputs.as<bf16>();  // this stage's layers' inputs and its output
  bf16* dx = take<bf16>(ops, ws.dx, N * H);
  bf16* dxn = take<bf16>(ops, ws.dxn, N * H);
  bf16* dtmp = take<bf16>(ops, ws.dtmp, N * H);
  if (c.shard.last_stage())
    ops.rmsnorm_backward(N, H, saved + stage.count() * N * H, w.f(w.layout.final_norm), c.rms_norm_eps,
                         d_hidden, dx, grads[w.layout.final_norm].as<float>());
  else
    receive_from_stage(call, dx, N * H, c.shard.pp_rank + 1);  // d(this stage's output)
  for (int64_t l = stage.end - 1; l >= stage.first; --l) {
    const LayerTensors& L = w.layout.layers[l];
    const int64_t at = l - stage.first;  // the layer's input among the stage's
    bf16* x = take<bf16>(ops, ws.x, N * H);
    ops.copy(x, saved + at * N * H, size_t(N * H) * 2);
    layer_forward(call, static_cast<int>(l), x);
    // x_out = h + MoE(norm2(h)); h = x_in + mixer(norm1(x_in)).
    moe_backward_layer(call, static_cast<int>(l), ws.xn2.as<bf16>(), dx, dxn, grads, router_grad);
    ops.rmsnorm_backward(N, H, ws.h.as<bf16>(), w.f(L.post_norm), c.rms_norm_eps, dxn, dtmp,
                         grads[L.post_norm].as<float>());
    ops.add_inplace(N * H, dtmp, dx);  // dh
    // A shard's heads give partial sums: of dxn and of the gradients of the per-head norms every
    // head shares (q_norm, k_norm, the GDN output norm).
    PartialGradients partial(call, grads, partial_gradients(c, L));
    if (L.attention)
      attention_backward_layer(call, static_cast<int>(l), ws.xn.as<bf16>(), dx, dxn, grads);
    else
      gdn_backward_layer(call, static_cast<int>(l), ws.xn.as<bf16>(), dx, dxn, grads);
    partial.sum();
    sum_over_tensor(call, dxn, N * H);
    ops.rmsnorm_backward(N, H, saved + at * N * H, w.f(L.input_norm), c.rms_norm_eps, dxn, dtmp,
                         grads[L.input_norm].as<float>());
    ops.add_inplace(N * H, dtmp, dx);  // dx_in
  }
  if (c.shard.first_stage())
    ops.embedding_backward(N, H, embedding_ids(call), dx, grads[w.layout.embed].as<float>());
  else
    send_to_stage(call, dx, N * H, c.shard.pp_rank - 1);
  ops.synchronize();
}

}  // namespace mlpt::ref::dev
