// The decoder stack on the device: embedding, layers (mixer + MoE with zero-centred pre-norms and
// bf16 residuals), final norm; and the backward recomputing each layer from its saved input. The
// same structure as model/model.cpp and model/layer_*.cpp, with this folder's ops.
#include "backends/cuda/model.hpp"

#include <algorithm>
#include <cmath>
#include <string>

#include "backends/cuda/activations.hpp"
#include "backends/cuda/attention.hpp"
#include "backends/cuda/conv.hpp"
#include "backends/cuda/embedding.hpp"
#include "backends/cuda/gdn.hpp"
#include "backends/cuda/head.hpp"
#include "backends/cuda/linear.hpp"
#include "backends/cuda/moe.hpp"
#include "backends/cuda/norms.hpp"
#include "backends/cuda/parallel/staged_expert_dispatch.hpp"
#include "backends/cuda/rope.hpp"
#include "mlpt/sdk/error.hpp"

namespace mlpt::ref::cuda {

namespace {

constexpr double kL2Eps = 1e-6;  // §2.4.4, fixed

template <class T>
T* take(DeviceBuffer& b, int64_t n) {
  b.reserve(size_t(std::max<int64_t>(n, 1)) * sizeof(T));
  return b.as<T>();
}

void upload(const Context& ctx, void* dst, const void* src, size_t bytes, const char* what) {
  if (bytes == 0) return;
  check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, ctx.stream), what);
  check(cudaStreamSynchronize(ctx.stream), what);  // the host buffer may go away after return
}
template <class T>
T* upload_vec(const Context& ctx, DeviceBuffer& b, const std::vector<T>& v, const char* what) {
  T* p = take<T>(b, static_cast<int64_t>(v.size()));
  upload(ctx, p, v.data(), v.size() * sizeof(T), what);
  return p;
}
// Rows of `width` bytes between pitched buffers on the device.
void copy_rows(const Context& ctx, void* dst, size_t dpitch, const void* src, size_t spitch, size_t width,
               int64_t rows, const char* what) {
  if (rows <= 0 || width == 0) return;
  check(cudaMemcpy2DAsync(dst, dpitch, src, spitch, width, size_t(rows), cudaMemcpyDeviceToDevice, ctx.stream), what);
}
void zero(const Context& ctx, void* p, size_t bytes, const char* what) {
  if (bytes) check(cudaMemsetAsync(p, 0, bytes, ctx.stream), what);
}

}  // namespace

struct GdnTape {
  DeviceBuffer qkv, z, a, b, conv, q, k, v, g, beta, o, y;
};
struct AttentionTape {
  DeviceBuffer qg, q_raw, k_raw, q, k, v, o, lse, gated;
};
struct MoeTape {
  DeviceBuffer logits, weights, experts, sg, su, sh, s_out, s_logit;
};

struct Workspace {
  // Forward state of the current layer (the backward's tape).
  DeviceBuffer x, xn, xn2, h, m;
  GdnTape gdn;
  AttentionTape attn;
  MoeTape moe;
  // Batch description on the device.
  DeviceBuffer tokens, offsets, positions, replay_all, record_all, replay_layer, conv_ptrs, state_ptrs, table,
      kv_lengths;
  std::vector<int64_t> host_offsets;
  bool has_states = false, replay = false;
  int64_t max_blocks = 0;
  // Op scratch and backward buffers.
  DeviceBuffer moe_scratch, gdn_scratch, attn_scratch;
  DeviceBuffer dx, dxn, dtmp, b0, b1, b2, b3, b4, b5, f0, f1, f2, f3, f4;
  // Tensor-parallel sums: fp32 copies of bf16 partial sums, and gradients set aside.
  DeviceBuffer tp_values, tp_earlier;
};
void WorkspaceDeleter::operator()(Workspace* w) const { delete w; }
WorkspacePtr make_workspace() { return WorkspacePtr(new Workspace()); }

bool is_fp32_tensor(const ModelLayout& layout, int i) { return layout.tensors[i].init != Init::normal; }

DeviceWeights allocate_weights(const ModelConfig& c) {
  DeviceWeights d{c, make_layout(c), {}};
  for (size_t i = 0; i < d.layout.tensors.size(); ++i)
    d.tensors.emplace_back(size_t(std::max<int64_t>(d.layout.tensors[i].numel(), 1)) *
                           (is_fp32_tensor(d.layout, static_cast<int>(i)) ? 4 : 2));
  return d;
}

DeviceWeights upload_weights(const Context& ctx, const Weights<float>& w) {
  DeviceWeights d = allocate_weights(w.config);
  DeviceBuffer staging;
  for (size_t i = 0; i < w.values.size(); ++i) {
    const int64_t n = static_cast<int64_t>(w.values[i].size());
    const bool f32 = is_fp32_tensor(w.layout, static_cast<int>(i));
    if (f32) {
      upload(ctx, d.tensors.back().get(), w.values[i].data(), size_t(n) * 4, "upload_weights");
    } else {
      float* s = upload_vec(ctx, staging, w.values[i], "upload_weights");
      to_bf16(ctx, n, s, d.tensors.back().as<bf16>());
      check(cudaStreamSynchronize(ctx.stream), "upload_weights");
    }
  }
  return d;
}

void assign_tensor(const Context& ctx, DeviceWeights& w, int i, const float* src) {
  const int64_t n = w.layout.tensors[i].numel();
  if (is_fp32_tensor(w.layout, i))
    check(cudaMemcpyAsync(w.tensors[i].get(), src, size_t(n) * 4, cudaMemcpyDeviceToDevice, ctx.stream),
          "assign_tensor");
  else
    to_bf16(ctx, n, src, w.tensors[i].as<bf16>());
}

std::vector<float> download_tensor(const Context& ctx, const DeviceWeights& w, int i) {
  const int64_t n = w.layout.tensors[i].numel();
  std::vector<float> out(static_cast<size_t>(n));
  DeviceBuffer tmp;
  const float* src = w.f(i);
  if (!is_fp32_tensor(w.layout, i)) {
    float* t = take<float>(tmp, n);
    to_float(ctx, n, w.bf(i), t);
    src = t;
  }
  check(cudaMemcpyAsync(out.data(), src, size_t(n) * 4, cudaMemcpyDeviceToHost, ctx.stream), "download_tensor");
  check(cudaStreamSynchronize(ctx.stream), "download_tensor");
  return out;
}

DeviceSequenceState::DeviceSequenceState(const Context& ctx, const ModelConfig& c)
    : conv(size_t(c.num_layers)), state(size_t(c.num_layers)) {
  for (int64_t l = 0; l < c.num_layers; ++l) {
    if (c.attention_layer[l]) continue;
    const size_t cb = size_t((c.conv_kernel - 1) * c.conv_dim()) * 2;
    const size_t sb = size_t(c.gdn_value_heads * c.gdn_key_dim * c.gdn_value_dim) * 4;
    conv[l].reserve(std::max<size_t>(cb, 1));
    state[l].reserve(sb);
    zero(ctx, conv[l].get(), cb, "sequence state: zero");
    zero(ctx, state[l].get(), sb, "sequence state: zero");
  }
}

void DeviceSequenceState::copy_recurrent_from(const Context& ctx, const DeviceSequenceState& o) {
  for (size_t l = 0; l < conv.size(); ++l) {
    if (!o.state[l].get()) continue;
    check(cudaMemcpyAsync(conv[l].get(), o.conv[l].get(), o.conv[l].bytes(), cudaMemcpyDeviceToDevice, ctx.stream),
          "sequence state: copy");
    check(cudaMemcpyAsync(state[l].get(), o.state[l].get(), o.state[l].bytes(), cudaMemcpyDeviceToDevice,
                          ctx.stream),
          "sequence state: copy");
  }
  length = o.length;
}

KvCache::KvCache(const ModelConfig& c, int64_t blocks, int64_t bs)
    : block_size(bs), num_blocks(blocks), k(size_t(c.num_layers)), v(size_t(c.num_layers)) {
  const size_t per = bytes_per_block(c) / 2 / size_t(std::max<int64_t>(c.num_attention_layers(), 1));
  for (int64_t l = 0; l < c.num_layers; ++l) {
    if (!c.attention_layer[l]) continue;
    k[l].reserve(per * size_t(blocks));
    v[l].reserve(per * size_t(blocks));
  }
}

size_t KvCache::bytes_per_block(const ModelConfig& c) const {
  return size_t(2 * block_size * c.num_kv_heads * c.head_dim * 2 * c.num_attention_layers());
}

namespace {

// What every layer of one call needs.
struct Call {
  const Context& ctx;
  const DeviceWeights& w;
  const DeviceBatch& batch;
  Workspace& ws;
  int64_t N;
  int64_t S;
  const int64_t* offsets;    // device
  const int64_t* positions;  // device
  KvCache* kv;
  Communicator* tensor;  // the tensor-parallel group, NULL for one rank
  Communicator* expert;  // the expert-parallel group (host memory), NULL for one rank
  bool experts_dispatched() const { return expert && expert->size() > 1; }
};

// Partial sums of this rank's heads or FFN columns summed over the tensor-parallel group, in
// place (one rank: nothing to do). bf16 values are summed in fp32 and rounded once.
void sum_over_tensor(const Call& c, float* values, int64_t n) {
  if (!c.tensor || c.tensor->size() == 1 || n == 0) return;
  c.tensor->all_reduce_sum(values, size_t(n));
}
void sum_over_tensor(const Call& c, bf16* values, int64_t n) {
  if (!c.tensor || c.tensor->size() == 1 || n == 0) return;
  float* wide = take<float>(c.ws.tp_values, n);
  to_float(c.ctx, n, values, wide);
  c.tensor->all_reduce_sum(wide, size_t(n));
  to_bf16(c.ctx, n, wide, values);
}

// Gradients of tensors every head shares (per-head norms), which a shard's backward adds as partial
// sums while they may already hold earlier micro-batches' totals: set aside and zeroed, and after
// the layer's backward the layer's share summed over the group and the earlier totals added back
// (model/model.cpp's PartialGradients, on the device).
class PartialGradients {
 public:
  PartialGradients(const Call& c, std::vector<DeviceBuffer>& grads, std::vector<int> tensors)
      : c_(c), grads_(grads), tensors_(std::move(tensors)) {
    if (!c_.tensor || c_.tensor->size() == 1) tensors_.clear();
    int64_t total = 0;
    for (int i : tensors_) total += numel(i);
    float* earlier = take<float>(c_.ws.tp_earlier, total);
    for (int i : tensors_) {
      check(cudaMemcpyAsync(earlier, grads_[i].get(), size_t(numel(i)) * 4, cudaMemcpyDeviceToDevice, c_.ctx.stream),
            "backward: set partial gradients aside");
      zero(c_.ctx, grads_[i].get(), size_t(numel(i)) * 4, "backward: zero partial gradients");
      earlier += numel(i);
    }
  }
  void sum() {
    const float* earlier = c_.ws.tp_earlier.as<float>();
    for (int i : tensors_) {
      sum_over_tensor(c_, grads_[i].as<float>(), numel(i));
      add_inplace(c_.ctx, numel(i), earlier, grads_[i].as<float>());
      earlier += numel(i);
    }
  }

 private:
  int64_t numel(int i) const { return c_.w.layout.tensors[i].numel(); }
  const Call& c_;
  std::vector<DeviceBuffer>& grads_;
  std::vector<int> tensors_;
};

void gdn_forward(const Call& c, int layer, const bf16* xn, bf16* out) {
  const ModelConfig& cf = c.w.config;
  const GdnTensors& L = c.w.layout.layers[layer].gdn;
  GdnTape& t = c.ws.gdn;
  const int64_t N = c.N, H = cf.hidden_size, C = cf.conv_dim(), kd = cf.key_dim(), vd = cf.value_dim();
  const int64_t Hk = cf.gdn_key_heads, Hv = cf.gdn_value_heads, dk = cf.gdn_key_dim, dv = cf.gdn_value_dim;
  bf16* qkv = take<bf16>(t.qkv, N * C);
  bf16* z = take<bf16>(t.z, N * vd);
  bf16* a = take<bf16>(t.a, N * Hv);
  bf16* b = take<bf16>(t.b, N * Hv);
  linear_forward(c.ctx, N, C, H, xn, c.w.bf(L.qkv), qkv);
  linear_forward(c.ctx, N, vd, H, xn, c.w.bf(L.z), z);
  linear_forward(c.ctx, N, Hv, H, xn, c.w.bf(L.b), b);
  linear_forward(c.ctx, N, Hv, H, xn, c.w.bf(L.a), a);

  bf16* const* conv_caches = nullptr;
  float* const* states = nullptr;
  if (c.ws.has_states) {
    std::vector<bf16*> cp(size_t(c.S));
    std::vector<float*> sp(size_t(c.S));
    for (int64_t s = 0; s < c.S; ++s) {
      DeviceSequenceState* st = c.batch.states[s];
      cp[s] = st ? st->conv[layer].as<bf16>() : nullptr;
      sp[s] = st ? st->state[layer].as<float>() : nullptr;
    }
    conv_caches = upload_vec(c.ctx, c.ws.conv_ptrs, cp, "gdn: window pointers");
    states = upload_vec(c.ctx, c.ws.state_ptrs, sp, "gdn: state pointers");
  }
  bf16* conv = take<bf16>(t.conv, N * C);
  causal_conv_silu_forward(c.ctx, C, cf.conv_kernel, c.offsets, c.S, N, qkv, c.w.f(L.conv), conv_caches, true, conv);
  float* q = take<float>(t.q, N * kd);
  float* k = take<float>(t.k, N * kd);
  bf16* v = take<bf16>(t.v, N * vd);
  l2norm_forward(c.ctx, N * Hk, Hk, dk, conv, C, kL2Eps, 1.0 / std::sqrt(double(dk)), q);
  l2norm_forward(c.ctx, N * Hk, Hk, dk, conv + kd, C, kL2Eps, 1.0, k);
  copy_rows(c.ctx, v, size_t(vd) * 2, conv + 2 * kd, size_t(C) * 2, size_t(vd) * 2, N, "gdn: v");
  float* g = take<float>(t.g, N * Hv);
  float* beta = take<float>(t.beta, N * Hv);
  gdn_gates_forward(c.ctx, N, Hv, a, b, c.w.f(L.a_log), c.w.f(L.dt_bias), g, beta);
  bf16* o = take<bf16>(t.o, N * vd);
  const GdnShape shape{Hk, Hv, dk, dv};
  (c.batch.chunked ? gdn_chunked_forward : gdn_recurrent_forward)(c.ctx, shape, c.offsets, c.S, q, k, v, g, beta,
                                                                 states, o);
  bf16* y = take<bf16>(t.y, N * vd);
  gated_rmsnorm_forward(c.ctx, N * Hv, dv, o, z, c.w.f(L.norm), cf.rms_norm_eps, y);
  linear_forward(c.ctx, N, H, vd, y, c.w.bf(L.out), out);
}

void attention_forward_layer(const Call& c, int layer, const bf16* xn, bf16* out) {
  const ModelConfig& cf = c.w.config;
  const AttentionTensors& L = c.w.layout.layers[layer].attn;
  AttentionTape& t = c.ws.attn;
  const int64_t N = c.N, H = cf.hidden_size, nh = cf.num_heads, nkv = cf.num_kv_heads, D = cf.head_dim;
  bf16* qg = take<bf16>(t.qg, N * nh * 2 * D);
  bf16* k_raw = take<bf16>(t.k_raw, N * nkv * D);
  bf16* v = take<bf16>(t.v, N * nkv * D);
  linear_forward(c.ctx, N, nh * 2 * D, H, xn, c.w.bf(L.q), qg);
  linear_forward(c.ctx, N, nkv * D, H, xn, c.w.bf(L.k), k_raw);
  linear_forward(c.ctx, N, nkv * D, H, xn, c.w.bf(L.v), v);
  bf16* q_raw = take<bf16>(t.q_raw, N * nh * D);
  copy_rows(c.ctx, q_raw, size_t(D) * 2, qg, size_t(2 * D) * 2, size_t(D) * 2, N * nh, "attention: q");
  bf16* q = take<bf16>(t.q, N * nh * D);
  bf16* k = take<bf16>(t.k, N * nkv * D);
  rmsnorm_forward(c.ctx, N * nh, D, q_raw, c.w.f(L.q_norm), cf.rms_norm_eps, q);
  rmsnorm_forward(c.ctx, N * nkv, D, k_raw, c.w.f(L.k_norm), cf.rms_norm_eps, k);
  rope_forward(c.ctx, N, nh, D, cf.rotary_dim, cf.rope_theta, c.positions, q);
  rope_forward(c.ctx, N, nkv, D, cf.rotary_dim, cf.rope_theta, c.positions, k);
  bf16* o = take<bf16>(t.o, N * nh * D);
  const AttentionShape shape{nh, nkv, D};
  if (!c.ws.has_states) {
    float* lse = take<float>(t.lse, N * nh);
    attention_forward(c.ctx, shape, c.offsets, c.offsets, c.S, N, q, k, v, o, lse);
  } else {
    bf16* kp = c.kv->k[layer].as<bf16>();
    bf16* vp = c.kv->v[layer].as<bf16>();
    const int32_t* table = c.ws.table.as<int32_t>();
    const int64_t* lengths = c.ws.kv_lengths.as<int64_t>();
    paged_kv_write(c.ctx, shape, c.offsets, lengths, c.S, N, k, v, kp, vp, table, c.ws.max_blocks, c.kv->block_size);
    attention_forward_paged(c.ctx, shape, c.offsets, lengths, c.S, N, q, kp, vp, table, c.ws.max_blocks,
                            c.kv->block_size, o);
  }
  bf16* gated = take<bf16>(t.gated, N * nh * D);
  sigmoid_gate_forward(c.ctx, N * nh, D, o, D, qg + D, 2 * D, gated);
  linear_forward(c.ctx, N, H, nh * D, gated, c.w.bf(L.o), out);
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
  float* logits = take<float>(t.logits, N * E);
  logits_forward(c.ctx, N, E, H, xn, c.w.bf(L.router), logits);  // fp32 router logits (§7)
  int16_t* experts = take<int16_t>(t.experts, N * k);
  float* weights = take<float>(t.weights, N * k);
  const int16_t* replay = nullptr;
  if (c.ws.replay) {
    int16_t* r = take<int16_t>(c.ws.replay_layer, N * k);
    copy_rows(c.ctx, r, size_t(k) * 2, c.ws.replay_all.as<int16_t>() + layer * k, size_t(Lc * k) * 2, size_t(k) * 2,
              N, "moe: replay");
    replay = r;
  }
  const MoeShape shape = moe_shape(cf);
  route(c.ctx, shape, N, logits, replay, experts, weights, nullptr);
  if (c.batch.routed_experts)
    copy_rows(c.ctx, c.ws.record_all.as<int16_t>() + layer * k, size_t(Lc * k) * 2, experts, size_t(k) * 2,
              size_t(k) * 2, N, "moe: record");
  zero(c.ctx, out, size_t(N * H) * 2, "moe: zero");
  if (c.experts_dispatched())
    staged_experts_forward(c.ctx, *c.expert, shape, N, xn, experts, weights, c.w.bf(L.gate_up), c.w.bf(L.down), out,
                           c.ws.moe_scratch);
  else
    experts_forward(c.ctx, shape, N, xn, experts, weights, c.w.bf(L.gate_up), c.w.bf(L.down), out, c.ws.moe_scratch);
  bf16* sg = take<bf16>(t.sg, N * Is);
  bf16* su = take<bf16>(t.su, N * Is);
  bf16* sh = take<bf16>(t.sh, N * Is);
  bf16* s_out = take<bf16>(t.s_out, N * H);
  bf16* s_logit = take<bf16>(t.s_logit, N);
  linear_forward(c.ctx, N, Is, H, xn, c.w.bf(L.shared_gate), sg);
  linear_forward(c.ctx, N, Is, H, xn, c.w.bf(L.shared_up), su);
  linear_forward(c.ctx, N, 1, H, xn, c.w.bf(L.shared_expert_gate), s_logit);
  swiglu_forward(c.ctx, N, Is, sg, su, Is, sh);
  linear_forward(c.ctx, N, H, Is, sh, c.w.bf(L.shared_down), s_out);
  scaled_add_forward(c.ctx, N, H, s_logit, s_out, out);
}

// x ← x + mixer(norm1(x)); h = x; x ← x + moe(norm2(x)). Leaves the layer's tape in the workspace.
void layer_forward(const Call& c, int layer, bf16* x) {
  const ModelConfig& cf = c.w.config;
  const LayerTensors& L = c.w.layout.layers[layer];
  const int64_t n = c.N * cf.hidden_size;
  bf16* xn = take<bf16>(c.ws.xn, n);
  bf16* m = take<bf16>(c.ws.m, n);
  rmsnorm_forward(c.ctx, c.N, cf.hidden_size, x, c.w.f(L.input_norm), cf.rms_norm_eps, xn);
  if (L.attention)
    attention_forward_layer(c, layer, xn, m);
  else
    gdn_forward(c, layer, xn, m);
  sum_over_tensor(c, m, n);  // this rank's heads' share
  add_inplace(c.ctx, n, m, x);
  bf16* h = take<bf16>(c.ws.h, n);
  check(cudaMemcpyAsync(h, x, size_t(n) * 2, cudaMemcpyDeviceToDevice, c.ctx.stream), "layer: h");
  bf16* xn2 = take<bf16>(c.ws.xn2, n);
  rmsnorm_forward(c.ctx, c.N, cf.hidden_size, x, c.w.f(L.post_norm), cf.rms_norm_eps, xn2);
  moe_forward(c, layer, xn2, m);
  sum_over_tensor(c, m, n);  // this rank's FFN columns' share
  add_inplace(c.ctx, n, m, x);
}

// Validates the batch on the host and puts its description on the device.
Call prepare(const Context& ctx, const DeviceWeights& w, const DeviceBatch& b, Workspace& ws) {
  const ModelConfig& c = w.config;
  const int64_t N = b.num_tokens(), S = static_cast<int64_t>(b.num_segments());
  check_groups(c.shard, b.parallel);
  if (b.offsets.empty() || b.offsets[0] != 0) throw sdk::Error(MLPT_INVALID_ARGUMENT, "forward: offsets must start at 0");
  for (int64_t s = 0; s < S; ++s)
    if (b.offsets[s + 1] < b.offsets[s])
      throw sdk::Error(MLPT_INVALID_ARGUMENT, "forward: offsets decrease at segment " + std::to_string(s));
  if (static_cast<int64_t>(b.tokens.size()) != N)
    throw sdk::Error(MLPT_INTERNAL, "forward: " + std::to_string(b.tokens.size()) + " tokens for offsets ending at " +
                                        std::to_string(N));
  for (int64_t t = 0; t < N; ++t)
    if (b.tokens[t] < 0 || b.tokens[t] >= c.vocab_size)
      throw sdk::Error(MLPT_INVALID_ARGUMENT, "token " + std::to_string(b.tokens[t]) + " at position " +
                                                  std::to_string(t) + " is outside the vocabulary [0, " +
                                                  std::to_string(c.vocab_size) + ")");
  const int64_t k = c.experts_per_token, Lc = c.num_layers;
  if (b.replay_experts)
    for (int64_t i = 0; i < N * Lc * k; ++i)
      if (b.replay_experts[i] < 0 || b.replay_experts[i] >= c.num_experts)
        throw sdk::Error(MLPT_INVALID_ARGUMENT, "routed_experts: layer " + std::to_string((i / k) % Lc) + ", token " +
                                                    std::to_string(i / (k * Lc)) + ": expert " +
                                                    std::to_string(b.replay_experts[i]) + " is outside [0, " +
                                                    std::to_string(c.num_experts) + ")");
  if (!b.states.empty() && static_cast<int64_t>(b.states.size()) != S)
    throw sdk::Error(MLPT_INTERNAL, "forward: states must be empty or one per segment");
  ws.has_states = false;
  for (auto* st : b.states) ws.has_states |= st != nullptr;
  std::vector<int64_t> pos(static_cast<size_t>(N));
  for (int64_t s = 0; s < S; ++s) {
    const int64_t base = ws.has_states ? b.states[s]->length : 0;
    for (int64_t t = b.offsets[s]; t < b.offsets[s + 1]; ++t) pos[t] = base + (t - b.offsets[s]);
  }
  if (ws.has_states) {
    if (!b.kv) throw sdk::Error(MLPT_INTERNAL, "forward: sequence states need a KV cache");
    ws.max_blocks = 1;
    std::vector<int64_t> lengths(static_cast<size_t>(S));
    for (int64_t s = 0; s < S; ++s) {
      DeviceSequenceState* st = b.states[s];
      if (!st) throw sdk::Error(MLPT_INTERNAL, "forward: with states, every segment needs one");
      lengths[s] = st->length + (b.offsets[s + 1] - b.offsets[s]);
      if (static_cast<int64_t>(st->blocks.size()) * b.kv->block_size < lengths[s])
        throw sdk::Error(MLPT_INTERNAL, "forward: segment " + std::to_string(s) + " has KV blocks for " +
                                            std::to_string(st->blocks.size() * b.kv->block_size) + " tokens, needs " +
                                            std::to_string(lengths[s]));
      ws.max_blocks = std::max<int64_t>(ws.max_blocks, static_cast<int64_t>(st->blocks.size()));
    }
    std::vector<int32_t> table(size_t(S * ws.max_blocks), 0);
    for (int64_t s = 0; s < S; ++s)
      std::copy(b.states[s]->blocks.begin(), b.states[s]->blocks.end(), table.begin() + s * ws.max_blocks);
    upload_vec(ctx, ws.table, table, "forward: block table");
    upload_vec(ctx, ws.kv_lengths, lengths, "forward: kv lengths");
  }
  ws.host_offsets = b.offsets;
  ws.replay = b.replay_experts != nullptr;
  if (ws.replay) {
    int16_t* r = take<int16_t>(ws.replay_all, N * Lc * k);
    upload(ctx, r, b.replay_experts, size_t(N * Lc * k) * 2, "forward: replayed experts");
  }
  if (b.routed_experts) take<int16_t>(ws.record_all, N * Lc * k);
  upload_vec(ctx, ws.tokens, b.tokens, "forward: tokens");
  const int64_t* offsets = upload_vec(ctx, ws.offsets, b.offsets, "forward: offsets");
  const int64_t* positions = upload_vec(ctx, ws.positions, pos, "forward: positions");
  return Call{ctx, w, b, ws, N, S, offsets, positions, b.kv, b.parallel ? b.parallel->tensor : nullptr,
              b.parallel ? b.parallel->expert : nullptr};
}

}  // namespace

void forward_hidden(const Context& ctx, const DeviceWeights& w, const DeviceBatch& b, Workspace& ws,
                    DeviceBuffer& hidden, DeviceBuffer* layer_inputs) {
  const ModelConfig& c = w.config;
  Call call = prepare(ctx, w, b, ws);
  const int64_t N = call.N, H = c.hidden_size, Lc = c.num_layers, k = c.experts_per_token;
  bf16* x = take<bf16>(ws.x, N * H);
  embedding_forward(ctx, N, H, ws.tokens.as<int32_t>(), w.bf(w.layout.embed), x);
  bf16* saved = layer_inputs ? take<bf16>(*layer_inputs, (Lc + 1) * N * H) : nullptr;
  for (int64_t l = 0; l < Lc; ++l) {
    if (saved)
      check(cudaMemcpyAsync(saved + l * N * H, x, size_t(N * H) * 2, cudaMemcpyDeviceToDevice, ctx.stream),
            "forward: save layer input");
    layer_forward(call, static_cast<int>(l), x);
  }
  if (saved)
    check(cudaMemcpyAsync(saved + Lc * N * H, x, size_t(N * H) * 2, cudaMemcpyDeviceToDevice, ctx.stream),
          "forward: save last layer output");
  bf16* out = take<bf16>(hidden, N * H);
  rmsnorm_forward(ctx, N, H, x, w.f(w.layout.final_norm), c.rms_norm_eps, out);
  if (b.routed_experts) {
    check(cudaMemcpyAsync(b.routed_experts, ws.record_all.get(), size_t(N * Lc * k) * 2, cudaMemcpyDeviceToHost,
                          ctx.stream),
          "forward: routed experts");
  }
  check(cudaStreamSynchronize(ctx.stream), "forward");
  for (size_t s = 0; s < b.num_segments(); ++s)
    if (!b.states.empty() && b.states[s]) b.states[s]->length += b.offsets[s + 1] - b.offsets[s];
}

namespace {

void gdn_backward_layer(const Call& c, int layer, const bf16* xn, const bf16* dout, bf16* dxn,
                        std::vector<DeviceBuffer>& grads) {
  const ModelConfig& cf = c.w.config;
  const GdnTensors& L = c.w.layout.layers[layer].gdn;
  GdnTape& t = c.ws.gdn;
  Workspace& ws = c.ws;
  const int64_t N = c.N, H = cf.hidden_size, C = cf.conv_dim(), kd = cf.key_dim(), vd = cf.value_dim();
  const int64_t Hk = cf.gdn_key_heads, Hv = cf.gdn_value_heads, dk = cf.gdn_key_dim, dv = cf.gdn_value_dim;
  auto G = [&](int i) { return grads[i].as<float>(); };
  bf16* dy = take<bf16>(ws.b0, N * vd);
  linear_backward_input(c.ctx, N, H, vd, dout, c.w.bf(L.out), dy, false);
  linear_backward_weight(c.ctx, N, H, vd, dout, t.y.as<bf16>(), G(L.out));
  bf16* d_o = take<bf16>(ws.b1, N * vd);
  bf16* dz = take<bf16>(ws.b2, N * vd);
  gated_rmsnorm_backward(c.ctx, N * Hv, dv, t.o.as<bf16>(), t.z.as<bf16>(), c.w.f(L.norm), cf.rms_norm_eps, dy, d_o,
                         dz, G(L.norm));
  float* dq = take<float>(ws.f0, N * kd);
  float* dk_ = take<float>(ws.f1, N * kd);
  float* dg = take<float>(ws.f2, N * Hv);
  float* dbeta = take<float>(ws.f3, N * Hv);
  bf16* dv_ = take<bf16>(ws.b3, N * vd);
  const GdnShape shape{Hk, Hv, dk, dv};
  gdn_backward(c.ctx, shape, c.offsets, ws.host_offsets.data(), c.S, t.q.as<float>(), t.k.as<float>(),
               t.v.as<bf16>(), t.g.as<float>(), t.beta.as<float>(), d_o, dq, dk_, dv_, dg, dbeta, ws.gdn_scratch);
  bf16* da = take<bf16>(ws.b4, N * Hv);
  bf16* db = take<bf16>(ws.b5, N * Hv);
  gdn_gates_backward(c.ctx, N, Hv, t.a.as<bf16>(), t.b.as<bf16>(), c.w.f(L.a_log), c.w.f(L.dt_bias), dg, dbeta, da,
                     db, G(L.a_log), G(L.dt_bias));
  bf16* dconv = take<bf16>(ws.b0, N * C);  // dy is no longer needed
  const bf16* conv = t.conv.as<bf16>();
  l2norm_backward(c.ctx, N * Hk, Hk, dk, conv, C, kL2Eps, 1.0 / std::sqrt(double(dk)), dq, dconv, C);
  l2norm_backward(c.ctx, N * Hk, Hk, dk, conv + kd, C, kL2Eps, 1.0, dk_, dconv + kd, C);
  copy_rows(c.ctx, dconv + 2 * kd, size_t(C) * 2, dv_, size_t(vd) * 2, size_t(vd) * 2, N, "gdn backward: dv");
  bf16* dqkv = take<bf16>(ws.b1, N * C);  // d_o is no longer needed
  causal_conv_silu_backward(c.ctx, C, cf.conv_kernel, c.offsets, c.S, N, t.qkv.as<bf16>(), c.w.f(L.conv), dconv, dqkv,
                            G(L.conv));
  linear_backward_input(c.ctx, N, C, H, dqkv, c.w.bf(L.qkv), dxn, false);
  linear_backward_input(c.ctx, N, vd, H, dz, c.w.bf(L.z), dxn, true);
  linear_backward_input(c.ctx, N, Hv, H, db, c.w.bf(L.b), dxn, true);
  linear_backward_input(c.ctx, N, Hv, H, da, c.w.bf(L.a), dxn, true);
  linear_backward_weight(c.ctx, N, C, H, dqkv, xn, G(L.qkv));
  linear_backward_weight(c.ctx, N, vd, H, dz, xn, G(L.z));
  linear_backward_weight(c.ctx, N, Hv, H, db, xn, G(L.b));
  linear_backward_weight(c.ctx, N, Hv, H, da, xn, G(L.a));
}

void attention_backward_layer(const Call& c, int layer, const bf16* xn, const bf16* dout, bf16* dxn,
                              std::vector<DeviceBuffer>& grads) {
  const ModelConfig& cf = c.w.config;
  const AttentionTensors& L = c.w.layout.layers[layer].attn;
  AttentionTape& t = c.ws.attn;
  Workspace& ws = c.ws;
  const int64_t N = c.N, H = cf.hidden_size, nh = cf.num_heads, nkv = cf.num_kv_heads, D = cf.head_dim;
  auto G = [&](int i) { return grads[i].as<float>(); };
  bf16* dgated = take<bf16>(ws.b0, N * nh * D);
  linear_backward_input(c.ctx, N, H, nh * D, dout, c.w.bf(L.o), dgated, false);
  linear_backward_weight(c.ctx, N, H, nh * D, dout, t.gated.as<bf16>(), G(L.o));
  bf16* d_o = take<bf16>(ws.b1, N * nh * D);
  bf16* dqg = take<bf16>(ws.b2, N * nh * 2 * D);
  sigmoid_gate_backward(c.ctx, N * nh, D, t.o.as<bf16>(), D, t.qg.as<bf16>() + D, 2 * D, dgated, d_o, D, dqg + D,
                        2 * D);
  bf16* dq = take<bf16>(ws.b3, N * nh * D);
  bf16* dk = take<bf16>(ws.b4, N * nkv * D);
  bf16* dv = take<bf16>(ws.b5, N * nkv * D);
  const AttentionShape shape{nh, nkv, D};
  attention_backward(c.ctx, shape, c.offsets, c.offsets, c.S, N, N, t.q.as<bf16>(), t.k.as<bf16>(), t.v.as<bf16>(),
                     t.o.as<bf16>(), t.lse.as<float>(), d_o, dq, dk, dv, ws.attn_scratch);
  rope_backward(c.ctx, N, nh, D, cf.rotary_dim, cf.rope_theta, c.positions, dq);
  rope_backward(c.ctx, N, nkv, D, cf.rotary_dim, cf.rope_theta, c.positions, dk);
  bf16* dq_raw = take<bf16>(ws.b0, N * nh * D);  // dgated is no longer needed
  bf16* dk_raw = take<bf16>(ws.b1, N * nkv * D);  // neither is d_o
  rmsnorm_backward(c.ctx, N * nh, D, t.q_raw.as<bf16>(), c.w.f(L.q_norm), cf.rms_norm_eps, dq, dq_raw, G(L.q_norm));
  rmsnorm_backward(c.ctx, N * nkv, D, t.k_raw.as<bf16>(), c.w.f(L.k_norm), cf.rms_norm_eps, dk, dk_raw, G(L.k_norm));
  copy_rows(c.ctx, dqg, size_t(2 * D) * 2, dq_raw, size_t(D) * 2, size_t(D) * 2, N * nh, "attention backward: dq");
  linear_backward_input(c.ctx, N, nh * 2 * D, H, dqg, c.w.bf(L.q), dxn, false);
  linear_backward_input(c.ctx, N, nkv * D, H, dk_raw, c.w.bf(L.k), dxn, true);
  linear_backward_input(c.ctx, N, nkv * D, H, dv, c.w.bf(L.v), dxn, true);
  linear_backward_weight(c.ctx, N, nh * 2 * D, H, dqg, xn, G(L.q));
  linear_backward_weight(c.ctx, N, nkv * D, H, dk_raw, xn, G(L.k));
  linear_backward_weight(c.ctx, N, nkv * D, H, dv, xn, G(L.v));
}

void moe_backward_layer(const Call& c, int layer, const bf16* xn, const bf16* dout, bf16* dxn,
                        std::vector<DeviceBuffer>& grads, bool router_grad) {
  const ModelConfig& cf = c.w.config;
  const MoeTensors& L = c.w.layout.layers[layer].moe;
  MoeTape& t = c.ws.moe;
  Workspace& ws = c.ws;
  const int64_t N = c.N, H = cf.hidden_size, E = cf.num_experts, k = cf.experts_per_token;
  const int64_t Is = cf.shared_intermediate;
  auto G = [&](int i) { return grads[i].as<float>(); };
  // On a tensor-parallel shard the shared expert's and every routed expert's FFN columns are this
  // rank's: their contributions to dxn, dlogit and dweights are partial sums, summed over the group
  // before the replicated shared expert gate and router add theirs (once, on every rank alike).
  bf16* dlogit = take<bf16>(ws.b0, N);
  bf16* dS = take<bf16>(ws.b1, N * H);
  scaled_add_backward(c.ctx, N, H, t.s_logit.as<bf16>(), t.s_out.as<bf16>(), dout, dlogit, dS);
  sum_over_tensor(c, dlogit, N);  // <dout, s_out> needs the whole shared output
  bf16* dsh = take<bf16>(ws.b2, N * Is);
  linear_backward_input(c.ctx, N, H, Is, dS, c.w.bf(L.shared_down), dsh, false);
  linear_backward_weight(c.ctx, N, H, Is, dS, t.sh.as<bf16>(), G(L.shared_down));
  bf16* dsg = take<bf16>(ws.b3, N * Is);
  bf16* dsu = take<bf16>(ws.b4, N * Is);
  swiglu_backward(c.ctx, N, Is, t.sg.as<bf16>(), t.su.as<bf16>(), Is, dsh, dsg, dsu, Is);
  linear_backward_input(c.ctx, N, Is, H, dsg, c.w.bf(L.shared_gate), dxn, false);
  linear_backward_input(c.ctx, N, Is, H, dsu, c.w.bf(L.shared_up), dxn, true);
  linear_backward_weight(c.ctx, N, Is, H, dsg, xn, G(L.shared_gate));
  linear_backward_weight(c.ctx, N, Is, H, dsu, xn, G(L.shared_up));

  const MoeShape shape = moe_shape(cf);
  float* dweights = take<float>(ws.f0, N * k);
  if (c.experts_dispatched())
    staged_experts_backward(c.ctx, *c.expert, shape, N, xn, t.experts.as<int16_t>(), t.weights.as<float>(),
                            c.w.bf(L.gate_up), c.w.bf(L.down), dout, dxn, dweights, G(L.gate_up), G(L.down),
                            ws.moe_scratch);
  else
    experts_backward(c.ctx, shape, N, xn, t.experts.as<int16_t>(), t.weights.as<float>(), c.w.bf(L.gate_up),
                     c.w.bf(L.down), dout, dxn, true, dweights, G(L.gate_up), G(L.down), ws.moe_scratch);
  sum_over_tensor(c, dweights, N * k);
  sum_over_tensor(c, dxn, N * H);

  // The replicated parts: the shared expert gate, then the router through the gating weights.
  linear_backward_input(c.ctx, N, 1, H, dlogit, c.w.bf(L.shared_expert_gate), dxn, true);
  linear_backward_weight(c.ctx, N, 1, H, dlogit, xn, G(L.shared_expert_gate));
  float* dlogits = take<float>(ws.f1, N * E);
  route_backward(c.ctx, shape, N, t.logits.as<float>(), t.experts.as<int16_t>(), t.weights.as<float>(), dweights,
                 dlogits);
  bf16* dl = take<bf16>(ws.b5, N * E);
  to_bf16(c.ctx, N * E, dlogits, dl);
  linear_backward_input(c.ctx, N, E, H, dl, c.w.bf(L.router), dxn, true);
  if (router_grad) linear_backward_weight(c.ctx, N, E, H, dl, xn, G(L.router));
}

}  // namespace

void backward(const Context& ctx, const DeviceWeights& w, const DeviceBatch& b, const DeviceBuffer& layer_inputs,
              const int16_t* experts, const bf16* d_hidden, std::vector<DeviceBuffer>& grads, bool router_grad,
              Workspace& ws) {
  const ModelConfig& c = w.config;
  for (auto* st : b.states)
    if (st) throw sdk::Error(MLPT_INTERNAL, "backward: batches with generation states are not differentiable");
  DeviceBatch replayed = b;  // recompute each layer with the routing the forward used
  replayed.replay_experts = experts;
  replayed.routed_experts = nullptr;
  Call call = prepare(ctx, w, replayed, ws);
  const int64_t N = call.N, H = c.hidden_size, Lc = c.num_layers;
  const bf16* saved = layer_inputs.as<bf16>();
  bf16* dx = take<bf16>(ws.dx, N * H);
  bf16* dxn = take<bf16>(ws.dxn, N * H);
  bf16* dtmp = take<bf16>(ws.dtmp, N * H);
  rmsnorm_backward(ctx, N, H, saved + Lc * N * H, w.f(w.layout.final_norm), c.rms_norm_eps, d_hidden, dx,
                   grads[w.layout.final_norm].as<float>());
  for (int64_t l = Lc - 1; l >= 0; --l) {
    const LayerTensors& L = w.layout.layers[l];
    bf16* x = take<bf16>(ws.x, N * H);
    check(cudaMemcpyAsync(x, saved + l * N * H, size_t(N * H) * 2, cudaMemcpyDeviceToDevice, ctx.stream),
          "backward: layer input");
    layer_forward(call, static_cast<int>(l), x);
    // x_out = h + MoE(norm2(h)); h = x_in + mixer(norm1(x_in)).
    moe_backward_layer(call, static_cast<int>(l), ws.xn2.as<bf16>(), dx, dxn, grads, router_grad);
    rmsnorm_backward(ctx, N, H, ws.h.as<bf16>(), w.f(L.post_norm), c.rms_norm_eps, dxn, dtmp,
                     grads[L.post_norm].as<float>());
    add_inplace(ctx, N * H, dtmp, dx);  // dh
    // A shard's heads give partial sums: of dxn and of the gradients of the per-head norms every
    // head shares (q_norm, k_norm, the GDN output norm).
    PartialGradients partial(call, grads, L.attention ? std::vector<int>{L.attn.q_norm, L.attn.k_norm}
                                                      : std::vector<int>{L.gdn.norm});
    if (L.attention)
      attention_backward_layer(call, static_cast<int>(l), ws.xn.as<bf16>(), dx, dxn, grads);
    else
      gdn_backward_layer(call, static_cast<int>(l), ws.xn.as<bf16>(), dx, dxn, grads);
    partial.sum();
    sum_over_tensor(call, dxn, N * H);
    rmsnorm_backward(ctx, N, H, saved + l * N * H, w.f(L.input_norm), c.rms_norm_eps, dxn, dtmp,
                     grads[L.input_norm].as<float>());
    add_inplace(ctx, N * H, dtmp, dx);  // dx_in
  }
  embedding_backward(ctx, N, H, ws.tokens.as<int32_t>(), dx, grads[w.layout.embed].as<float>());
  check(cudaStreamSynchronize(ctx.stream), "backward");
}

}  // namespace mlpt::ref::cuda
