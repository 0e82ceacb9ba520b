// The Gated DeltaNet mixer (qwen35-architecture.md §2.4): projections, causal conv + SiLU (with the
// decode window), gates, q/k L2 norms, the recurrence (backends/cpu/gdn.hpp), gated output norm
// and out_proj; and its backward.
#include <cmath>

#include "backends/cpu/activations.hpp"
#include "backends/cpu/conv.hpp"
#include "backends/cpu/gdn.hpp"
#include "backends/cpu/linear.hpp"
#include "backends/cpu/norms.hpp"
#include "model/layers.hpp"

namespace mlpt::ref::detail {

namespace {
constexpr double kL2Eps = 1e-6;  // §2.4.4: inside the sqrt, fixed (not rms_norm_eps)

template <class T>
void run_gdn(bool chunked, const cpu::GdnShape& s, const int64_t* offsets, size_t n, const T* q, const T* k,
             const T* v, const T* g, const T* beta, const T* init, T* out, T* final_state) {
  if (chunked)
    cpu::gdn_chunked_forward(s, offsets, n, q, k, v, g, beta, init, out, final_state);
  else
    cpu::gdn_recurrent_forward(s, offsets, n, q, k, v, g, beta, init, out, final_state);
}
}  // namespace

template <class T>
void gdn_forward(const LayerContext<T>& ctx, const Weights<T>& w, const T* xn, T* out, GdnTape<T>* tape) {
  const ModelConfig& c = ctx.config;
  const GdnTensors& L = w.layout.layers[ctx.layer].gdn;
  const int64_t N = ctx.tokens, H = c.hidden_size, C = c.conv_dim(), kd = c.key_dim(), vd = c.value_dim();
  const int64_t Hk = c.gdn_key_heads, Hv = c.gdn_value_heads, dk = c.gdn_key_dim, dv = c.gdn_value_dim;
  GdnTape<T> local;
  GdnTape<T>& t = tape ? *tape : local;
  if (tape) t.xn.assign(xn, xn + N * H);
  t.qkv.resize(N * C);
  t.z.resize(N * vd);
  t.a.resize(N * Hv);
  t.b.resize(N * Hv);
  cpu::linear_forward(N, C, H, xn, w[L.qkv], t.qkv.data());
  cpu::linear_forward(N, vd, H, xn, w[L.z], t.z.data());
  cpu::linear_forward(N, Hv, H, xn, w[L.b], t.b.data());
  cpu::linear_forward(N, Hv, H, xn, w[L.a], t.a.data());

  const size_t S = ctx.num_segments();
  std::vector<T*> windows(S, nullptr);
  for (size_t s = 0; s < S; ++s)
    if (auto* cache = ctx.cache(s)) windows[s] = cache->conv[ctx.layer].data();
  t.conv.resize(N * C);
  cpu::causal_conv_silu_forward(C, c.conv_kernel, ctx.offsets.data(), S, t.qkv.data(), w[L.conv], windows.data(), true,
                                t.conv.data());

  t.q.resize(N * kd);
  t.k.resize(N * kd);
  t.v.resize(N * vd);
  const double q_scale = 1.0 / std::sqrt(static_cast<double>(dk));
  for (int64_t i = 0; i < N; ++i) {
    const T* row = t.conv.data() + i * C;
    cpu::l2norm_forward(Hk, dk, row, dk, kL2Eps, q_scale, t.q.data() + i * kd);
    cpu::l2norm_forward(Hk, dk, row + kd, dk, kL2Eps, 1.0, t.k.data() + i * kd);
    std::copy(row + 2 * kd, row + C, t.v.data() + i * vd);
  }
  t.g.resize(N * Hv);
  t.beta.resize(N * Hv);
  cpu::gdn_gates_forward(N, Hv, t.a.data(), t.b.data(), w[L.a_log], w[L.dt_bias], t.g.data(), t.beta.data());

  t.o.resize(N * vd);
  const cpu::GdnShape shape{Hk, Hv, dk, dv};
  if (!ctx.any_cache()) {
    run_gdn(ctx.gdn_mode == GdnMode::chunked, shape, ctx.offsets.data(), S, t.q.data(), t.k.data(), t.v.data(),
            t.g.data(), t.beta.data(), static_cast<const T*>(nullptr), t.o.data(), static_cast<T*>(nullptr));
  } else {
    std::vector<T> final_state(static_cast<size_t>(Hv * dk * dv));
    for (size_t s = 0; s < S; ++s) {
      const int64_t b = ctx.offsets[s], n = ctx.offsets[s + 1] - b;
      if (n == 0) continue;
      const int64_t seg[2] = {0, n};
      auto* cache = ctx.cache(s);
      bool chunked = ctx.gdn_mode == GdnMode::chunked && n > 1;
      run_gdn(chunked, shape, seg, 1, t.q.data() + b * kd, t.k.data() + b * kd, t.v.data() + b * vd,
              t.g.data() + b * Hv, t.beta.data() + b * Hv, cache ? cache->state[ctx.layer].data() : nullptr,
              t.o.data() + b * vd, cache ? final_state.data() : nullptr);
      if (cache) std::copy(final_state.begin(), final_state.end(), cache->state[ctx.layer].begin());
    }
  }
  t.y.resize(N * vd);
  cpu::gated_rmsnorm_forward(N * Hv, dv, t.o.data(), t.z.data(), w[L.norm], c.rms_norm_eps, t.y.data());
  cpu::linear_forward(N, H, vd, t.y.data(), w[L.out], out);
}

template <class T>
void gdn_backward(const LayerContext<T>& ctx, const Weights<T>& w, const GdnTape<T>& t, const T* dout, T* dxn,
                  Weights<T>& grads) {
  const ModelConfig& c = ctx.config;
  const GdnTensors& L = w.layout.layers[ctx.layer].gdn;
  const int64_t N = ctx.tokens, H = c.hidden_size, C = c.conv_dim(), kd = c.key_dim(), vd = c.value_dim();
  const int64_t Hk = c.gdn_key_heads, Hv = c.gdn_value_heads, dk = c.gdn_key_dim, dv = c.gdn_value_dim;
  const size_t S = ctx.num_segments();

  std::vector<T> dy(N * vd);
  cpu::linear_backward_input(N, H, vd, dout, w[L.out], dy.data(), false);
  cpu::linear_backward_weight(N, H, vd, dout, t.y.data(), grads[L.out]);

  std::vector<T> d_o(N * vd), dz(N * vd);
  cpu::gated_rmsnorm_backward(N * Hv, dv, t.o.data(), t.z.data(), w[L.norm], c.rms_norm_eps, dy.data(), d_o.data(),
                              dz.data(), grads[L.norm]);

  std::vector<T> dq(N * kd), dk_(N * kd), dv_(N * vd), dg(N * Hv), dbeta(N * Hv);
  const cpu::GdnShape shape{Hk, Hv, dk, dv};
  cpu::gdn_backward(shape, ctx.offsets.data(), S, t.q.data(), t.k.data(), t.v.data(), t.g.data(), t.beta.data(),
                    static_cast<const T*>(nullptr), d_o.data(), static_cast<const T*>(nullptr), dq.data(), dk_.data(),
                    dv_.data(), dg.data(), dbeta.data(), static_cast<T*>(nullptr));

  std::vector<T> da(N * Hv), db(N * Hv);
  cpu::gdn_gates_backward(N, Hv, t.a.data(), t.b.data(), w[L.a_log], w[L.dt_bias], dg.data(), dbeta.data(), da.data(),
                          db.data(), grads[L.a_log], grads[L.dt_bias]);

  std::vector<T> dconv(N * C);
  const double q_scale = 1.0 / std::sqrt(static_cast<double>(dk));
  for (int64_t i = 0; i < N; ++i) {
    const T* row = t.conv.data() + i * C;
    T* drow = dconv.data() + i * C;
    cpu::l2norm_backward(Hk, dk, row, dk, kL2Eps, q_scale, dq.data() + i * kd, drow, dk);
    cpu::l2norm_backward(Hk, dk, row + kd, dk, kL2Eps, 1.0, dk_.data() + i * kd, drow + kd, dk);
    std::copy(dv_.begin() + i * vd, dv_.begin() + (i + 1) * vd, drow + 2 * kd);
  }
  std::vector<T> dqkv(N * C);
  cpu::causal_conv_silu_backward(C, c.conv_kernel, ctx.offsets.data(), S, t.qkv.data(), w[L.conv], dconv.data(),
                                 dqkv.data(), grads[L.conv]);

  cpu::linear_backward_input(N, C, H, dqkv.data(), w[L.qkv], dxn, false);
  cpu::linear_backward_input(N, vd, H, dz.data(), w[L.z], dxn, true);
  cpu::linear_backward_input(N, Hv, H, db.data(), w[L.b], dxn, true);
  cpu::linear_backward_input(N, Hv, H, da.data(), w[L.a], dxn, true);
  cpu::linear_backward_weight(N, C, H, dqkv.data(), t.xn.data(), grads[L.qkv]);
  cpu::linear_backward_weight(N, vd, H, dz.data(), t.xn.data(), grads[L.z]);
  cpu::linear_backward_weight(N, Hv, H, db.data(), t.xn.data(), grads[L.b]);
  cpu::linear_backward_weight(N, Hv, H, da.data(), t.xn.data(), grads[L.a]);
}

template void gdn_forward<float>(const LayerContext<float>&, const Weights<float>&, const float*, float*, GdnTape<float>*);
template void gdn_forward<double>(const LayerContext<double>&, const Weights<double>&, const double*, double*, GdnTape<double>*);
template void gdn_backward<float>(const LayerContext<float>&, const Weights<float>&, const GdnTape<float>&, const float*, float*, Weights<float>&);
template void gdn_backward<double>(const LayerContext<double>&, const Weights<double>&, const GdnTape<double>&, const double*, double*, Weights<double>&);

}  // namespace mlpt::ref::detail
