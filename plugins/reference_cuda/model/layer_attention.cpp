// The gated full-attention mixer (docs/qwen35-architecture.md §2.5): q/gate interleaved per head, q/k
// zero-centred norms, partial NeoX RoPE, causal GQA over the KV cache (backends/cpu/attention.hpp),
// sigmoid output gate, o_proj; and its backward.
#include "backends/cpu/activations.hpp"
#include "backends/cpu/attention.hpp"
#include "backends/cpu/linear.hpp"
#include "backends/cpu/norms.hpp"
#include "backends/cpu/rope.hpp"
#include "model/layers.hpp"

namespace mlpt::ref::detail {

namespace {
// With parents, every segment's keys and values gathered into one packed kv buffer: a continuation
// sees its parent's rows, then its own (a prefix's rows are read by each of its continuations).
template <class T>
struct ForkedKv {
  std::vector<int64_t> offsets{0};  // kv offsets per segment
  std::vector<int64_t> rows;        // kv row -> token row
  explicit ForkedKv(const LayerContext<T>& ctx) {
    for (size_t s = 0; s < ctx.num_segments(); ++s) {
      if (int32_t p = ctx.parent(s); p >= 0)
        for (int64_t r = ctx.offsets[p]; r < ctx.offsets[p + 1]; ++r) rows.push_back(r);
      for (int64_t r = ctx.offsets[s]; r < ctx.offsets[s + 1]; ++r) rows.push_back(r);
      offsets.push_back(static_cast<int64_t>(rows.size()));
    }
  }
  std::vector<T> gather(const std::vector<T>& x, int64_t width) const {
    std::vector<T> out(rows.size() * width);
    for (size_t i = 0; i < rows.size(); ++i)
      std::copy_n(x.begin() + rows[i] * width, width, out.begin() + static_cast<int64_t>(i) * width);
    return out;
  }
  void scatter_add(const std::vector<T>& g, int64_t width, std::vector<T>& to) const {
    std::fill(to.begin(), to.end(), T(0));
    for (size_t i = 0; i < rows.size(); ++i)
      for (int64_t j = 0; j < width; ++j) to[rows[i] * width + j] += g[i * width + j];
  }
};
}  // namespace

template <class T>
void attention_forward(const LayerContext<T>& ctx, const Weights<T>& w, const T* xn, T* out, AttentionTape<T>* tape) {
  const ModelConfig& c = ctx.config;
  const AttentionTensors& L = w.layout.layers[ctx.layer].attn;
  const int64_t N = ctx.tokens, H = c.hidden_size, nh = c.num_heads, nkv = c.num_kv_heads, D = c.head_dim;
  AttentionTape<T> local;
  AttentionTape<T>& t = tape ? *tape : local;
  if (tape) t.xn.assign(xn, xn + N * H);
  t.qg.resize(N * nh * 2 * D);
  t.k_raw.resize(N * nkv * D);
  t.v.resize(N * nkv * D);
  cpu::linear_forward(N, nh * 2 * D, H, xn, w[L.q], t.qg.data());
  cpu::linear_forward(N, nkv * D, H, xn, w[L.k], t.k_raw.data());
  cpu::linear_forward(N, nkv * D, H, xn, w[L.v], t.v.data());
  t.q_raw.resize(N * nh * D);
  for (int64_t r = 0; r < N * nh; ++r)
    std::copy(t.qg.begin() + r * 2 * D, t.qg.begin() + r * 2 * D + D, t.q_raw.begin() + r * D);
  t.q.resize(N * nh * D);
  t.k.resize(N * nkv * D);
  cpu::rmsnorm_forward(N * nh, D, t.q_raw.data(), w[L.q_norm], c.rms_norm_eps, t.q.data());
  cpu::rmsnorm_forward(N * nkv, D, t.k_raw.data(), w[L.k_norm], c.rms_norm_eps, t.k.data());
  cpu::rope_forward(N, nh, D, c.rotary_dim, c.rope_theta, ctx.positions.data(), t.q.data());
  cpu::rope_forward(N, nkv, D, c.rotary_dim, c.rope_theta, ctx.positions.data(), t.k.data());

  t.o.resize(N * nh * D);
  const cpu::AttentionShape shape{nh, nkv, D};
  const size_t S = ctx.num_segments();
  if (ctx.any_parent()) {
    const ForkedKv<T> kv(ctx);
    std::vector<T> k = kv.gather(t.k, nkv * D), v = kv.gather(t.v, nkv * D);
    cpu::attention_forward(shape, ctx.offsets.data(), kv.offsets.data(), S, t.q.data(), k.data(), v.data(),
                           t.o.data());
  } else if (!ctx.any_cache()) {
    cpu::attention_forward(shape, ctx.offsets.data(), ctx.offsets.data(), S, t.q.data(), t.k.data(), t.v.data(),
                           t.o.data());
  } else {
    for (size_t s = 0; s < S; ++s) {
      const int64_t b = ctx.offsets[s], n = ctx.offsets[s + 1] - b;
      if (n == 0) continue;
      const T* q = t.q.data() + b * nh * D;
      T* o = t.o.data() + b * nh * D;
      if (auto* cache = ctx.cache(s)) {
        auto& keys = cache->keys[ctx.layer];
        auto& values = cache->values[ctx.layer];
        keys.insert(keys.end(), t.k.begin() + b * nkv * D, t.k.begin() + (b + n) * nkv * D);
        values.insert(values.end(), t.v.begin() + b * nkv * D, t.v.begin() + (b + n) * nkv * D);
        const int64_t qo[2] = {0, n}, ko[2] = {0, static_cast<int64_t>(keys.size()) / (nkv * D)};
        cpu::attention_forward(shape, qo, ko, 1, q, keys.data(), values.data(), o);
      } else {
        const int64_t qo[2] = {0, n};
        cpu::attention_forward(shape, qo, qo, 1, q, t.k.data() + b * nkv * D, t.v.data() + b * nkv * D, o);
      }
    }
  }
  t.gated.resize(N * nh * D);
  cpu::sigmoid_gate_forward(N * nh, D, t.o.data(), D, t.qg.data() + D, 2 * D, t.gated.data());
  cpu::linear_forward(N, H, nh * D, t.gated.data(), w[L.o], out);
}

template <class T>
void attention_backward(const LayerContext<T>& ctx, const Weights<T>& w, const AttentionTape<T>& t, const T* dout,
                        T* dxn, Weights<T>& grads) {
  const ModelConfig& c = ctx.config;
  const AttentionTensors& L = w.layout.layers[ctx.layer].attn;
  const int64_t N = ctx.tokens, H = c.hidden_size, nh = c.num_heads, nkv = c.num_kv_heads, D = c.head_dim;

  std::vector<T> dgated(N * nh * D);
  cpu::linear_backward_input(N, H, nh * D, dout, w[L.o], dgated.data(), false);
  cpu::linear_backward_weight(N, H, nh * D, dout, t.gated.data(), grads[L.o]);

  std::vector<T> d_o(N * nh * D), dqg(N * nh * 2 * D);
  cpu::sigmoid_gate_backward(N * nh, D, t.o.data(), D, t.qg.data() + D, 2 * D, dgated.data(), d_o.data(), D,
                             dqg.data() + D, 2 * D);

  std::vector<T> dq(N * nh * D), dk(N * nkv * D), dv(N * nkv * D);
  const cpu::AttentionShape shape{nh, nkv, D};
  if (ctx.any_parent()) {
    const ForkedKv<T> kv(ctx);
    std::vector<T> k = kv.gather(t.k, nkv * D), v = kv.gather(t.v, nkv * D), dk_kv(k.size()), dv_kv(v.size());
    cpu::attention_backward(shape, ctx.offsets.data(), kv.offsets.data(), ctx.num_segments(), t.q.data(), k.data(),
                            v.data(), d_o.data(), dq.data(), dk_kv.data(), dv_kv.data());
    kv.scatter_add(dk_kv, nkv * D, dk);  // a prefix's keys get every continuation's gradient
    kv.scatter_add(dv_kv, nkv * D, dv);
  } else {
    cpu::attention_backward(shape, ctx.offsets.data(), ctx.offsets.data(), ctx.num_segments(), t.q.data(),
                            t.k.data(), t.v.data(), d_o.data(), dq.data(), dk.data(), dv.data());
  }
  cpu::rope_backward(N, nh, D, c.rotary_dim, c.rope_theta, ctx.positions.data(), dq.data());
  cpu::rope_backward(N, nkv, D, c.rotary_dim, c.rope_theta, ctx.positions.data(), dk.data());

  std::vector<T> dq_raw(N * nh * D), dk_raw(N * nkv * D);
  cpu::rmsnorm_backward(N * nh, D, t.q_raw.data(), w[L.q_norm], c.rms_norm_eps, dq.data(), dq_raw.data(),
                        grads[L.q_norm]);
  cpu::rmsnorm_backward(N * nkv, D, t.k_raw.data(), w[L.k_norm], c.rms_norm_eps, dk.data(), dk_raw.data(),
                        grads[L.k_norm]);
  for (int64_t r = 0; r < N * nh; ++r)
    std::copy(dq_raw.begin() + r * D, dq_raw.begin() + (r + 1) * D, dqg.begin() + r * 2 * D);

  cpu::linear_backward_input(N, nh * 2 * D, H, dqg.data(), w[L.q], dxn, false);
  cpu::linear_backward_input(N, nkv * D, H, dk_raw.data(), w[L.k], dxn, true);
  cpu::linear_backward_input(N, nkv * D, H, dv.data(), w[L.v], dxn, true);
  cpu::linear_backward_weight(N, nh * 2 * D, H, dqg.data(), t.xn.data(), grads[L.q]);
  cpu::linear_backward_weight(N, nkv * D, H, dk_raw.data(), t.xn.data(), grads[L.k]);
  cpu::linear_backward_weight(N, nkv * D, H, dv.data(), t.xn.data(), grads[L.v]);
}

template void attention_forward<float>(const LayerContext<float>&, const Weights<float>&, const float*, float*, AttentionTape<float>*);
template void attention_forward<double>(const LayerContext<double>&, const Weights<double>&, const double*, double*, AttentionTape<double>*);
template void attention_backward<float>(const LayerContext<float>&, const Weights<float>&, const AttentionTape<float>&, const float*, float*, Weights<float>&);
template void attention_backward<double>(const LayerContext<double>&, const Weights<double>&, const AttentionTape<double>&, const double*, double*, Weights<double>&);

}  // namespace mlpt::ref::detail
