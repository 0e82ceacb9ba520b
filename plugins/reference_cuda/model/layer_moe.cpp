// The sparse MoE FFN (docs/qwen35-architecture.md §2.6): fp32 softmax router over all experts, top-k
// (or replayed experts), renormalised weights, routed SwiGLU experts and the sigmoid-gated shared
// expert; and its backward with the router gradient of §3.
#include "backends/cpu/activations.hpp"
#include "backends/cpu/linear.hpp"
#include "backends/cpu/moe.hpp"
#include "model/layers.hpp"
#include "model/parallel/expert_dispatch.hpp"
#include "mlpt/sdk/error.hpp"

namespace mlpt::ref::detail {

namespace {
cpu::MoeShape moe_shape(const ModelConfig& c) {
  return {c.hidden_size, c.num_experts, c.experts_per_token, c.moe_intermediate, c.norm_topk_prob};
}
}  // namespace

template <class T>
void moe_forward(const LayerContext<T>& ctx, const Weights<T>& w, const T* xn, const int16_t* replay, int16_t* record,
                 T* out, MoeTape<T>* tape) {
  const ModelConfig& c = ctx.config;
  const MoeTensors& L = w.layout.layers[ctx.layer].moe;
  const int64_t N = ctx.tokens, H = c.hidden_size, E = c.num_experts, k = c.experts_per_token;
  const int64_t Is = c.shared_intermediate;
  MoeTape<T> local;
  MoeTape<T>& t = tape ? *tape : local;
  if (tape) t.xn.assign(xn, xn + N * H);
  t.logits.resize(N * E);
  cpu::linear_forward(N, E, H, xn, w[L.router], t.logits.data());
  t.experts.resize(N * k);
  t.weights.resize(N * k);
  const cpu::MoeShape shape = moe_shape(c);
  if (!cpu::route(shape, N, t.logits.data(), replay, t.experts.data(), t.weights.data())) {
    for (int64_t i = 0; i < N * k; ++i)
      if (replay[i] < 0 || replay[i] >= E)
        throw sdk::Error(MLPT_INVALID_ARGUMENT, "routed_experts: layer " + std::to_string(ctx.layer) + ", token " +
                                                    std::to_string(i / k) + ": expert " + std::to_string(replay[i]) +
                                                    " is outside [0, " + std::to_string(E) + ")");
  }
  if (record) std::copy(t.experts.begin(), t.experts.end(), record);

  std::fill(out, out + N * H, T(0));
  if (ctx.parallel && ctx.parallel->routed_size() > 1) {  // this rank holds a block of the experts
    // Whole rows on every TP rank (expert tensor parallel 1): TP rank 0 adds them to the partial sums.
    std::vector<T> elsewhere(c.shard.routed_rows_whole_on_tp_ranks() && c.shard.tp_rank != 0 ? N * H : 0);
    dispatched_experts_forward(*ctx.parallel->routed_group(), ctx.parallel->row_sharers(), shape, N, xn,
                               t.experts.data(), t.weights.data(), w[L.gate_up], w[L.down],
                               elsewhere.empty() ? out : elsewhere.data());
  } else
    cpu::experts_forward(shape, N, xn, t.experts.data(), t.weights.data(), w[L.gate_up], w[L.down], out);

  t.sg.resize(N * Is);
  t.su.resize(N * Is);
  t.sh.resize(N * Is);
  t.s_out.resize(N * H);
  t.s_logit.resize(N);
  cpu::linear_forward(N, Is, H, xn, w[L.shared_gate], t.sg.data());
  cpu::linear_forward(N, Is, H, xn, w[L.shared_up], t.su.data());
  cpu::linear_forward(N, 1, H, xn, w[L.shared_expert_gate], t.s_logit.data());
  for (int64_t r = 0; r < N; ++r)
    for (int64_t i = 0; i < Is; ++i) t.sh[r * Is + i] = cpu::silu(t.sg[r * Is + i]) * t.su[r * Is + i];
  cpu::linear_forward(N, H, Is, t.sh.data(), w[L.shared_down], t.s_out.data());
  for (int64_t r = 0; r < N; ++r) {
    T s = cpu::sigmoid(t.s_logit[r]);
    for (int64_t i = 0; i < H; ++i) out[r * H + i] += s * t.s_out[r * H + i];
  }
}

template <class T>
void moe_backward(const LayerContext<T>& ctx, const Weights<T>& w, const MoeTape<T>& t, const T* dout, T* dxn,
                  Weights<T>& grads, bool router_grad) {
  const ModelConfig& c = ctx.config;
  const MoeTensors& L = w.layout.layers[ctx.layer].moe;
  const int64_t N = ctx.tokens, H = c.hidden_size, E = c.num_experts, k = c.experts_per_token;
  const int64_t Is = c.shared_intermediate;

  // On a tensor-parallel shard the shared expert's (and with etp = tp every routed expert's) FFN
  // columns are this rank's: their contributions to dxn, d_logit and dweights are partial sums,
  // summed over the group before the replicated router and shared expert gate add theirs (once, on
  // every rank alike). Whole routed rows (etp = 1) count on TP rank 0 only.
  Communicator* tensor_group = ctx.parallel ? ctx.parallel->tensor : nullptr;

  // Shared expert; its gate's d_logit needs the whole shared output, <dout, s_out>.
  std::vector<T> d_logit(N), dS(N * H);
  for (int64_t r = 0; r < N; ++r) {
    T s = cpu::sigmoid(t.s_logit[r]), dot = 0;
    for (int64_t i = 0; i < H; ++i) {
      dot += dout[r * H + i] * t.s_out[r * H + i];
      dS[r * H + i] = s * dout[r * H + i];
    }
    d_logit[r] = dot * s * (T(1) - s);
  }
  sum_over(tensor_group, d_logit.data(), static_cast<size_t>(N));
  std::vector<T> dsh(N * Is), dsg(N * Is), dsu(N * Is);
  cpu::linear_backward_input(N, H, Is, dS.data(), w[L.shared_down], dsh.data(), false);
  cpu::linear_backward_weight(N, H, Is, dS.data(), t.sh.data(), grads[L.shared_down]);
  cpu::swiglu_backward(N, Is, t.sg.data(), t.su.data(), Is, dsh.data(), dsg.data(), dsu.data(), Is);
  cpu::linear_backward_input(N, Is, H, dsg.data(), w[L.shared_gate], dxn, false);
  cpu::linear_backward_input(N, Is, H, dsu.data(), w[L.shared_up], dxn, true);
  cpu::linear_backward_weight(N, Is, H, dsg.data(), t.xn.data(), grads[L.shared_gate]);
  cpu::linear_backward_weight(N, Is, H, dsu.data(), t.xn.data(), grads[L.shared_up]);

  // Routed experts (on the ranks that own them under expert parallelism).
  const cpu::MoeShape shape = moe_shape(c);
  std::vector<T> dweights(N * k);
  if (ctx.parallel && ctx.parallel->routed_size() > 1) {
    // The dispatch needs dx equal on every rank of its group: with whole routed rows (etp = 1) its
    // group spans TP ranks whose dxn hold different partial sums, so it fills a zeroed dx of its
    // own, which TP rank 0 adds.
    const bool whole_rows = c.shard.routed_rows_whole_on_tp_ranks();
    std::vector<T> routed_dx(whole_rows ? N * H : 0, T(0));
    dispatched_experts_backward(*ctx.parallel->routed_group(), ctx.parallel->row_sharers(), shape, N,
                                t.xn.data(), t.experts.data(), t.weights.data(), w[L.gate_up], w[L.down],
                                dout, whole_rows ? routed_dx.data() : dxn, dweights.data(), grads[L.gate_up],
                                grads[L.down]);
    if (whole_rows && c.shard.tp_rank == 0)
      for (int64_t i = 0; i < N * H; ++i) dxn[i] += routed_dx[i];
    else if (whole_rows)
      std::fill(dweights.begin(), dweights.end(), T(0));
  } else
    cpu::experts_backward(shape, N, t.xn.data(), t.experts.data(), t.weights.data(), w[L.gate_up], w[L.down], dout,
                          dxn, dweights.data(), grads[L.gate_up], grads[L.down]);
  sum_over(tensor_group, dweights.data(), static_cast<size_t>(N * k));
  sum_over(tensor_group, dxn, static_cast<size_t>(N * H));

  // The replicated parts: the shared expert gate, then the router through the gating weights.
  cpu::linear_backward_input(N, 1, H, d_logit.data(), w[L.shared_expert_gate], dxn, true);
  cpu::linear_backward_weight(N, 1, H, d_logit.data(), t.xn.data(), grads[L.shared_expert_gate]);
  std::vector<T> dlogits(N * E);
  cpu::route_backward(shape, N, t.logits.data(), t.experts.data(), t.weights.data(), dweights.data(), dlogits.data());
  cpu::linear_backward_input(N, E, H, dlogits.data(), w[L.router], dxn, true);
  if (router_grad) cpu::linear_backward_weight(N, E, H, dlogits.data(), t.xn.data(), grads[L.router]);
}

template void moe_forward<float>(const LayerContext<float>&, const Weights<float>&, const float*, const int16_t*, int16_t*, float*, MoeTape<float>*);
template void moe_forward<double>(const LayerContext<double>&, const Weights<double>&, const double*, const int16_t*, int16_t*, double*, MoeTape<double>*);
template void moe_backward<float>(const LayerContext<float>&, const Weights<float>&, const MoeTape<float>&, const float*, float*, Weights<float>&, bool);
template void moe_backward<double>(const LayerContext<double>&, const Weights<double>&, const MoeTape<double>&, const double*, double*, Weights<double>&, bool);

}  // namespace mlpt::ref::detail
