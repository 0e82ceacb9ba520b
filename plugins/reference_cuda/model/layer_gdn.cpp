// The Gated DeltaNet mixer (docs/qwen35-architecture.md §2.4): projections, causal conv + SiLU (with the
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

// Calls f(s0, s1) for each maximal run of consecutive segments [s0, s1) that are continuations
// (have a parent) or are not, as asked: one kernel call covers a whole run.
template <class T, class F>
void for_runs(const LayerContext<T>& ctx, bool continuations, F f) {
  const size_t S = ctx.num_segments();
  for (size_t s0 = 0; s0 < S;) {
    if ((ctx.parent(s0) >= 0) != continuations) {
      ++s0;
      continue;
    }
    size_t s1 = s0 + 1;
    while (s1 < S && (ctx.parent(s1) >= 0) == continuations) ++s1;
    f(s0, s1);
    s0 = s1;
  }
}

// The conv window a continuation starts from: its parent's last K−1 raw inputs (zeros before the
// parent's start), [K−1, C] per segment, empty for the others.
template <class T>
std::vector<std::vector<T>> fork_windows(const LayerContext<T>& ctx, const T* qkv, int64_t C, int64_t K) {
  const int64_t W = K - 1;
  std::vector<std::vector<T>> out(ctx.num_segments());
  for (size_t s = 0; s < out.size(); ++s) {
    const int32_t p = ctx.parent(s);
    if (p < 0) continue;
    out[s].assign(static_cast<size_t>(W * C), T(0));
    const int64_t pb = ctx.offsets[p], pe = ctx.offsets[p + 1];
    for (int64_t i = 0; i < W; ++i)
      if (int64_t row = pe - W + i; row >= pb) std::copy(qkv + row * C, qkv + (row + 1) * C, out[s].begin() + i * C);
  }
  return out;
}

// The recurrence over a batch with parents: the segments without a parent first (keeping the final
// state of those that have continuations), then the continuations from their parent's state.
template <class T>
void gdn_forked_forward(const LayerContext<T>& ctx, const cpu::GdnShape& shape, GdnTape<T>& t) {
  const int64_t SS = shape.num_value_heads * shape.key_dim * shape.value_dim;
  const size_t S = ctx.num_segments();
  const bool chunked = ctx.gdn_mode == GdnMode::chunked;
  t.fork_slot.assign(S, -1);
  int64_t slots = 0;
  for (size_t s = 0; s < S; ++s)
    if (int32_t p = ctx.parent(s); p >= 0 && t.fork_slot[p] < 0) t.fork_slot[p] = slots++;
  t.fork_state.assign(static_cast<size_t>(slots * SS), T(0));
  const int64_t* off = ctx.offsets.data();
  std::vector<T> states;
  for_runs(ctx, false, [&](size_t s0, size_t s1) {
    states.resize((s1 - s0) * SS);
    run_gdn(chunked, shape, off + s0, s1 - s0, t.q.data(), t.k.data(), t.v.data(), t.g.data(), t.beta.data(),
            static_cast<const T*>(nullptr), t.o.data(), states.data());
    for (size_t s = s0; s < s1; ++s)
      if (t.fork_slot[s] >= 0)
        std::copy_n(states.begin() + (s - s0) * SS, SS, t.fork_state.begin() + t.fork_slot[s] * SS);
  });
  for_runs(ctx, true, [&](size_t s0, size_t s1) {
    states.resize((s1 - s0) * SS);
    for (size_t s = s0; s < s1; ++s)
      std::copy_n(t.fork_state.begin() + t.fork_slot[ctx.parent(s)] * SS, SS, states.begin() + (s - s0) * SS);
    run_gdn(chunked, shape, off + s0, s1 - s0, t.q.data(), t.k.data(), t.v.data(), t.g.data(), t.beta.data(),
            states.data(), t.o.data(), static_cast<T*>(nullptr));
  });
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
  std::vector<std::vector<T>> forks = fork_windows(ctx, t.qkv.data(), C, c.conv_kernel);
  for (size_t s = 0; s < S; ++s)
    if (auto* cache = ctx.cache(s))
      windows[s] = cache->conv[ctx.layer].data();
    else if (!forks[s].empty())
      windows[s] = forks[s].data();
  t.conv.resize(N * C);
  cpu::causal_conv_silu_forward(C, c.conv_kernel, ctx.offsets.data(), S, t.qkv.data(), w[L.conv], windows.data(),
                                ctx.any_cache(), t.conv.data());

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
  if (ctx.any_parent()) {
    gdn_forked_forward(ctx, shape, t);
  } else if (!ctx.any_cache()) {
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
  auto adjoint = [&](size_t s0, size_t s1, const T* init, const T* d_final, T* d_init) {
    cpu::gdn_backward(shape, ctx.offsets.data() + s0, s1 - s0, t.q.data(), t.k.data(), t.v.data(), t.g.data(),
                      t.beta.data(), init, d_o.data(), d_final, dq.data(), dk_.data(), dv_.data(), dg.data(),
                      dbeta.data(), d_init);
  };
  if (!ctx.any_parent()) {
    adjoint(0, S, nullptr, nullptr, nullptr);
  } else {
    // Continuations first: the gradient of each one's initial state is summed into its parent's
    // final state, whose adjoint then runs with it.
    const int64_t SS = Hv * dk * dv;
    std::vector<T> d_fork(t.fork_state.size(), T(0)), init, d_init;
    for_runs(ctx, true, [&](size_t s0, size_t s1) {
      init.resize((s1 - s0) * SS);
      d_init.resize((s1 - s0) * SS);
      for (size_t s = s0; s < s1; ++s)
        std::copy_n(t.fork_state.begin() + t.fork_slot[ctx.parent(s)] * SS, SS, init.begin() + (s - s0) * SS);
      adjoint(s0, s1, init.data(), nullptr, d_init.data());
      for (size_t s = s0; s < s1; ++s) {
        T* to = d_fork.data() + t.fork_slot[ctx.parent(s)] * SS;
        for (int64_t i = 0; i < SS; ++i) to[i] += d_init[(s - s0) * SS + i];
      }
    });
    std::vector<T> d_final;
    for_runs(ctx, false, [&](size_t s0, size_t s1) {
      d_final.assign((s1 - s0) * SS, T(0));
      for (size_t s = s0; s < s1; ++s)
        if (t.fork_slot[s] >= 0) std::copy_n(d_fork.begin() + t.fork_slot[s] * SS, SS, d_final.begin() + (s - s0) * SS);
      adjoint(s0, s1, nullptr, d_final.data(), nullptr);
    });
  }

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
  std::vector<std::vector<T>> forks = fork_windows(ctx, t.qkv.data(), C, c.conv_kernel);
  std::vector<std::vector<T>> d_forks(S);
  std::vector<const T*> windows(S, nullptr);
  std::vector<T*> d_windows(S, nullptr);
  for (size_t s = 0; s < S; ++s)
    if (!forks[s].empty()) {
      d_forks[s].resize(forks[s].size());
      windows[s] = forks[s].data();
      d_windows[s] = d_forks[s].data();
    }
  cpu::causal_conv_silu_backward(C, c.conv_kernel, ctx.offsets.data(), S, t.qkv.data(), w[L.conv], dconv.data(),
                                 dqkv.data(), grads[L.conv], windows.data(), d_windows.data());
  for (size_t s = 0; s < S; ++s) {  // a continuation's window is its parent's last K−1 inputs
    const int32_t p = ctx.parent(s);
    if (p < 0) continue;
    const int64_t W = c.conv_kernel - 1, pb = ctx.offsets[p], pe = ctx.offsets[p + 1];
    for (int64_t i = 0; i < W; ++i)
      if (int64_t row = pe - W + i; row >= pb)
        for (int64_t j = 0; j < C; ++j) dqkv[row * C + j] += d_forks[s][i * C + j];
  }

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
