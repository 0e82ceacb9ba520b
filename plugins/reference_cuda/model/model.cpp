// The decoder stack: embedding, layers (mixer + MoE with zero-centred pre-norms and residuals),
// final norm; the LM head; and the backward pass recomputing each layer from its saved input.
#include "model/model.hpp"

#include <type_traits>

#include "backends/cpu/linear.hpp"
#include "backends/cpu/norms.hpp"
#include "model/layers.hpp"
#include "model/parallel/pipeline_stages.hpp"
#include "model/parallel/shard_weights.hpp"
#include "model/parallel/vocab_parallel.hpp"
#include "mlpt/sdk/error.hpp"

namespace mlpt::ref {

using detail::LayerContext;

template <class T>
SequenceCache<T>::SequenceCache(const ModelConfig& c)
    : conv(c.num_layers), state(c.num_layers), keys(c.num_layers), values(c.num_layers) {
  for (int64_t l = 0; l < c.num_layers; ++l) {
    if (c.attention_layer[l]) continue;
    conv[l].assign(static_cast<size_t>((c.conv_kernel - 1) * c.conv_dim()), T(0));
    state[l].assign(static_cast<size_t>(c.gdn_value_heads * c.gdn_key_dim * c.gdn_value_dim), T(0));
  }
}

template <class T>
size_t SequenceCache<T>::bytes() const {
  size_t n = 0;
  for (size_t l = 0; l < conv.size(); ++l)
    n += conv[l].capacity() + state[l].capacity() + keys[l].capacity() + values[l].capacity();
  return n * sizeof(T);
}

namespace {

template <class T>
std::vector<int64_t> positions_of(const ForwardBatch<T>& b) {
  std::vector<int64_t> pos(static_cast<size_t>(b.num_tokens()));
  for (size_t s = 0; s < b.num_segments(); ++s) {
    int64_t base = b.caches.empty() || !b.caches[s] ? 0 : b.caches[s]->length;
    if (int32_t p = b.parent(s); p >= 0) base = b.offsets[p + 1] - b.offsets[p];  // continues its parent
    for (int64_t t = b.offsets[s]; t < b.offsets[s + 1]; ++t) pos[t] = base + (t - b.offsets[s]);
  }
  return pos;
}

template <class T>
void check_batch(const ModelConfig& c, const ForwardBatch<T>& b) {
  if (b.offsets.empty() || b.offsets[0] != 0) throw sdk::Error(MLPT_INVALID_ARGUMENT, "forward: offsets must start at 0");
  for (size_t s = 0; s < b.num_segments(); ++s)
    if (b.offsets[s + 1] < b.offsets[s])
      throw sdk::Error(MLPT_INVALID_ARGUMENT, "forward: offsets decrease at segment " + std::to_string(s));
  if (!b.caches.empty() && b.caches.size() != b.num_segments())
    throw sdk::Error(MLPT_INTERNAL, "forward: caches must be empty or one per segment");
  if (!b.parents.empty()) {
    if (b.parents.size() != b.num_segments()) throw sdk::Error(MLPT_INTERNAL, "forward: parents must be empty or one per segment");
    for (size_t s = 0; s < b.num_segments(); ++s) {
      const int32_t p = b.parents[s];
      if (p < -1 || p >= static_cast<int32_t>(s) || (p >= 0 && b.parents[p] != -1))
        throw sdk::Error(MLPT_INTERNAL, "forward: segment " + std::to_string(s) + " has parent " + std::to_string(p) +
                                            " (must be -1 or an earlier segment without a parent)");
      if (p >= 0 && !b.caches.empty() && (b.caches[s] || b.caches[p]))
        throw sdk::Error(MLPT_INTERNAL, "forward: a segment with a parent cannot also continue a cache");
    }
  }
  for (int64_t t = 0; t < b.num_tokens(); ++t)
    if (b.tokens[t] < 0 || b.tokens[t] >= c.vocab_size)
      throw sdk::Error(MLPT_INVALID_ARGUMENT, "token " + std::to_string(b.tokens[t]) + " at position " +
                                                  std::to_string(t) + " is outside the vocabulary [0, " +
                                                  std::to_string(c.vocab_size) + ")");
}

// A shard's generation caches hold its own heads (SequenceCache of the shard's config).
template <class T>
void check_parallel(const ModelConfig& c, const ForwardBatch<T>& b) {
  check_groups(c.shard, b.parallel);
}

// A pipeline stage's neighbours (model_parallel.hpp): the residual stream (or its gradient) of all
// the batch's tokens, passed point to point over the pipeline group, or through the caller's
// StageBoundary when it passes the messages itself.
template <class T>
void send_stage(const ForwardBatch<T>& b, const std::vector<T>& values, int peer) {
  if constexpr (std::is_same_v<T, float>) {
    if (!b.boundary) return b.parallel->pipeline->send(values.data(), values.size(), peer);
    if (!b.boundary->output)
      throw sdk::Error(MLPT_INTERNAL, "pipeline stage boundary without an output buffer");
    std::copy(values.begin(), values.end(), b.boundary->output);
  } else {
    throw sdk::Error(MLPT_UNIMPLEMENTED, "pipeline parallelism computes in float32 only");
  }
}
template <class T>
void recv_stage(const ForwardBatch<T>& b, std::vector<T>& values, int peer) {
  if constexpr (std::is_same_v<T, float>) {
    if (!b.boundary) return b.parallel->pipeline->recv(values.data(), values.size(), peer);
    if (!b.boundary->input) throw sdk::Error(MLPT_INTERNAL, "pipeline stage boundary without an input");
    std::copy_n(b.boundary->input, values.size(), values.begin());
  } else {
    throw sdk::Error(MLPT_UNIMPLEMENTED, "pipeline parallelism computes in float32 only");
  }
}

// Copies layer l's [tokens, k] slice out of / into a [tokens, layers, k] routing record.
template <class T>
void stop_if_cancelled(const ForwardBatch<T>& b, const char* pass, int64_t layer) {
  if (b.cancelled && b.cancelled())
    throw sdk::Error(MLPT_CANCELLED, std::string(pass) + " cancelled at layer " + std::to_string(layer));
}

void gather_layer(const int16_t* all, int64_t N, int64_t L, int64_t k, int64_t l, int16_t* out) {
  for (int64_t t = 0; t < N; ++t)
    for (int64_t i = 0; i < k; ++i) out[t * k + i] = all[(t * L + l) * k + i];
}
void scatter_layer(const int16_t* layer, int64_t N, int64_t L, int64_t k, int64_t l, int16_t* all) {
  for (int64_t t = 0; t < N; ++t)
    for (int64_t i = 0; i < k; ++i) all[(t * L + l) * k + i] = layer[t * k + i];
}

// One decoder layer's forward, filling the tapes when given.
template <class T>
struct LayerTapes {
  std::vector<T> xn, h, xn2;
  detail::GdnTape<T> gdn;
  detail::AttentionTape<T> attn;
  detail::MoeTape<T> moe;
};

template <class T>
void layer_forward(const LayerContext<T>& ctx, const Weights<T>& w, T* x, const int16_t* replay, int16_t* record,
                   LayerTapes<T>* tapes) {
  const ModelConfig& c = ctx.config;
  const LayerTensors& L = w.layout.layers[ctx.layer];
  const int64_t N = ctx.tokens, H = c.hidden_size;
  std::vector<T> xn(N * H), m(N * H);
  Communicator* tensor_group = ctx.parallel ? ctx.parallel->tensor : nullptr;
  cpu::rmsnorm_forward(N, H, x, w[L.input_norm], c.rms_norm_eps, xn.data());
  if (L.attention)
    detail::attention_forward(ctx, w, xn.data(), m.data(), tapes ? &tapes->attn : nullptr);
  else
    detail::gdn_forward(ctx, w, xn.data(), m.data(), tapes ? &tapes->gdn : nullptr);
  sum_over(tensor_group, m.data(), static_cast<size_t>(N * H));  // this rank's heads' share
  for (int64_t i = 0; i < N * H; ++i) x[i] += m[i];
  if (tapes) tapes->h.assign(x, x + N * H);
  cpu::rmsnorm_forward(N, H, x, w[L.post_norm], c.rms_norm_eps, xn.data());
  detail::moe_forward(ctx, w, xn.data(), replay, record, m.data(), tapes ? &tapes->moe : nullptr);
  sum_over(tensor_group, m.data(), static_cast<size_t>(N * H));  // this rank's FFN columns' share
  for (int64_t i = 0; i < N * H; ++i) x[i] += m[i];
}

// Gradients that one backward step adds as partial sums over a tensor-parallel group, while the
// tensors may already hold earlier micro-batches' totals: set aside, zeroed, and after the step
// the step's share summed over the group and the earlier totals added back.
template <class T>
class PartialGradients {
 public:
  PartialGradients(Communicator* group, Weights<T>& grads, std::vector<PartialTensor> tensors)
      : group_(group && group->size() > 1 ? group : nullptr), grads_(grads), tensors_(std::move(tensors)) {
    if (!group_) return;
    for (const PartialTensor& p : tensors_) {
      earlier_.push_back(grads_.values[p.tensor]);
      std::fill(grads_.values[p.tensor].begin(), grads_.values[p.tensor].end(), T(0));
    }
  }
  void sum() {
    if (!group_) return;
    for (size_t j = 0; j < tensors_.size(); ++j) {
      std::vector<T>& g = grads_.values[tensors_[j].tensor];
      const size_t n = g.size(), slot = static_cast<size_t>(tensors_[j].slot);
      if (tensors_[j].slots == 1) {
        sum_over(group_, g.data(), n);
      } else {  // this rank's share at its slot, zeros (which add nothing) at the others
        std::vector<T> padded(n * static_cast<size_t>(tensors_[j].slots), T(0));
        std::copy(g.begin(), g.end(), padded.begin() + slot * n);
        sum_over(group_, padded.data(), padded.size());
        std::copy(padded.begin() + slot * n, padded.begin() + (slot + 1) * n, g.begin());
      }
      for (size_t i = 0; i < n; ++i) g[i] += earlier_[j][i];
    }
  }

 private:
  Communicator* group_;
  Weights<T>& grads_;
  std::vector<PartialTensor> tensors_;
  std::vector<std::vector<T>> earlier_;
};

}  // namespace

template <class T>
std::vector<T> forward_hidden(const Weights<T>& w, ForwardBatch<T>& b) {
  const ModelConfig& c = w.config;
  check_batch(c, b);
  check_parallel(c, b);
  const int64_t N = b.num_tokens(), H = c.hidden_size, Lc = c.num_layers, k = c.experts_per_token;
  const StageLayers stage = stage_layers(Lc, c.shard);
  std::vector<int64_t> positions = positions_of(b);
  std::vector<T> x(N * H);
  if (c.shard.first_stage()) {
    // A vocabulary-parallel rank looks up the ids of its range, zeros elsewhere; the TP sum fills
    // every row (each from the one rank holding it, so exactly).
    const VocabRange vocab = vocab_range(c.vocab_size, c.shard);
    for (int64_t t = 0; t < N; ++t)
      if (vocab.holds(b.tokens[t]))
        std::copy_n(w[w.layout.embed] + (b.tokens[t] - vocab.begin) * H, H, x.begin() + t * H);
    if (vocab.count() < c.vocab_size) sum_over(b.parallel ? b.parallel->tensor : nullptr, x.data(), x.size());
  } else {
    recv_stage(b, x, c.shard.pp_rank - 1);
  }
  if (b.layer_inputs) {
    b.layer_inputs->resize(static_cast<size_t>((stage.count() + 1) * N * H));
    std::copy(x.begin(), x.end(), b.layer_inputs->begin());
  }
  std::vector<int16_t> replay(b.replay_experts ? N * k : 0), record(b.routed_experts ? N * k : 0);
  for (int64_t l = stage.first; l < stage.end; ++l) {
    stop_if_cancelled(b, "forward", l);
    LayerContext<T> ctx{c, N, b.offsets, b.caches, positions, b.gdn_mode, static_cast<int>(l), b.parents, b.parallel};
    if (b.replay_experts) gather_layer(b.replay_experts, N, Lc, k, l, replay.data());
    layer_forward(ctx, w, x.data(), b.replay_experts ? replay.data() : nullptr,
                  b.routed_experts ? record.data() : nullptr, static_cast<LayerTapes<T>*>(nullptr));
    if (b.routed_experts) scatter_layer(record.data(), N, Lc, k, l, b.routed_experts);
    if (b.layer_inputs) std::copy(x.begin(), x.end(), b.layer_inputs->begin() + (l - stage.first + 1) * N * H);
  }
  for (size_t s = 0; s < b.num_segments(); ++s)
    if (!b.caches.empty() && b.caches[s]) b.caches[s]->length += b.offsets[s + 1] - b.offsets[s];
  if (!c.shard.last_stage()) {
    send_stage(b, x, c.shard.pp_rank + 1);
    return {};
  }
  std::vector<T> out(N * H);
  cpu::rmsnorm_forward(N, H, x.data(), w[w.layout.final_norm], c.rms_norm_eps, out.data());
  return out;
}

template <class T>
void lm_head_forward(const Weights<T>& w, int64_t rows, const T* hidden, T* logits) {
  const int64_t V = vocab_range(w.config.vocab_size, w.config.shard).count();
  cpu::linear_forward(rows, V, w.config.hidden_size, hidden, w[w.layout.lm_head], logits);
}

template <class T>
void lm_head_backward(const Weights<T>& w, const ModelParallel* parallel, int64_t rows, const T* dlogits,
                      const T* hidden, T* d_hidden, Weights<T>& grads) {
  const int64_t V = vocab_range(w.config.vocab_size, w.config.shard).count(), H = w.config.hidden_size;
  cpu::linear_backward_input(rows, V, H, dlogits, w[w.layout.lm_head], d_hidden, false);
  if (V < w.config.vocab_size)
    sum_over(parallel ? parallel->tensor : nullptr, d_hidden, static_cast<size_t>(rows * H));
  cpu::linear_backward_weight(rows, V, H, dlogits, hidden, grads[w.layout.lm_head]);
}

template <class T>
void backward(const Weights<T>& w, const ForwardBatch<T>& b, const std::vector<T>& layer_inputs,
              const int16_t* experts, const T* d_hidden, Weights<T>& grads, const BackwardOptions& options) {
  const ModelConfig& c = w.config;
  for (auto* cache : b.caches)
    if (cache) throw sdk::Error(MLPT_INTERNAL, "backward: batches with generation caches are not differentiable");
  check_parallel(c, b);
  const int64_t N = b.num_tokens(), H = c.hidden_size, Lc = c.num_layers, k = c.experts_per_token;
  const StageLayers stage = stage_layers(Lc, c.shard);
  if (layer_inputs.size() != static_cast<size_t>((stage.count() + 1) * N * H))
    throw sdk::Error(MLPT_INTERNAL, "backward: layer_inputs do not match the batch");
  std::vector<int64_t> positions = positions_of(b);
  const std::vector<SequenceCache<T>*> no_caches;

  std::vector<T> dx(N * H), dxn(N * H), dtmp(N * H);
  if (c.shard.last_stage())
    cpu::rmsnorm_backward(N, H, layer_inputs.data() + stage.count() * N * H, w[w.layout.final_norm], c.rms_norm_eps,
                          d_hidden, dx.data(), grads[w.layout.final_norm]);
  else
    recv_stage(b, dx, c.shard.pp_rank + 1);  // d(this stage's output), from the next stage
  std::vector<int16_t> layer_experts(N * k);
  Communicator* tensor_group = b.parallel ? b.parallel->tensor : nullptr;
  for (int64_t l = stage.end - 1; l >= stage.first; --l) {
    stop_if_cancelled(b, "backward", l);
    const LayerTensors& L = w.layout.layers[l];
    LayerContext<T> ctx{c, N, b.offsets, no_caches, positions, b.gdn_mode, static_cast<int>(l), b.parents, b.parallel};
    gather_layer(experts, N, Lc, k, l, layer_experts.data());
    LayerTapes<T> tapes;
    const int64_t at = l - stage.first;  // the layer's input among the stage's
    std::vector<T> x(layer_inputs.begin() + at * N * H, layer_inputs.begin() + (at + 1) * N * H);
    layer_forward(ctx, w, x.data(), layer_experts.data(), static_cast<int16_t*>(nullptr), &tapes);

    // x_out = h + MoE(norm2(h)); h = x_in + mixer(norm1(x_in)).
    detail::moe_backward(ctx, w, tapes.moe, dx.data(), dxn.data(), grads, options.router_grad);
    cpu::rmsnorm_backward(N, H, tapes.h.data(), w[L.post_norm], c.rms_norm_eps, dxn.data(), dtmp.data(),
                          grads[L.post_norm]);
    for (int64_t i = 0; i < N * H; ++i) dx[i] += dtmp[i];  // dh
    // A shard's heads give partial sums: of dxn and of the gradients of the per-head norms every
    // head shares (q_norm, k_norm, the GDN output norm).
    PartialGradients<T> partial(tensor_group, grads, partial_gradients(c, L));
    if (L.attention)
      detail::attention_backward(ctx, w, tapes.attn, dx.data(), dxn.data(), grads);
    else
      detail::gdn_backward(ctx, w, tapes.gdn, dx.data(), dxn.data(), grads);
    partial.sum();
    sum_over(tensor_group, dxn.data(), static_cast<size_t>(N * H));
    cpu::rmsnorm_backward(N, H, layer_inputs.data() + at * N * H, w[L.input_norm], c.rms_norm_eps, dxn.data(),
                          dtmp.data(), grads[L.input_norm]);
    for (int64_t i = 0; i < N * H; ++i) dx[i] += dtmp[i];  // dx_in
  }
  if (!c.shard.first_stage()) return send_stage(b, dx, c.shard.pp_rank - 1);
  T* de = grads[w.layout.embed];  // this rank's vocabulary range's rows (dx is whole on every TP rank)
  const VocabRange vocab = vocab_range(c.vocab_size, c.shard);
  for (int64_t t = 0; t < N; ++t)
    if (vocab.holds(b.tokens[t]))
      for (int64_t i = 0; i < H; ++i) de[(b.tokens[t] - vocab.begin) * H + i] += dx[t * H + i];
}

template struct SequenceCache<float>;
template struct SequenceCache<double>;
template std::vector<float> forward_hidden<float>(const Weights<float>&, ForwardBatch<float>&);
template std::vector<double> forward_hidden<double>(const Weights<double>&, ForwardBatch<double>&);
template void lm_head_forward<float>(const Weights<float>&, int64_t, const float*, float*);
template void lm_head_forward<double>(const Weights<double>&, int64_t, const double*, double*);
template void lm_head_backward<float>(const Weights<float>&, const ModelParallel*, int64_t, const float*,
                                      const float*, float*, Weights<float>&);
template void lm_head_backward<double>(const Weights<double>&, const ModelParallel*, int64_t, const double*,
                                       const double*, double*, Weights<double>&);
template void backward<float>(const Weights<float>&, const ForwardBatch<float>&, const std::vector<float>&,
                              const int16_t*, const float*, Weights<float>&, const BackwardOptions&);
template void backward<double>(const Weights<double>&, const ForwardBatch<double>&, const std::vector<double>&,
                               const int16_t*, const double*, Weights<double>&, const BackwardOptions&);

}  // namespace mlpt::ref
