// What the device-model tests share on the CPU (tests/reference_cuda/model) and the GPU
// (tests/reference_cuda/backends/cuda): a small config with every head grouping real and two GDN chunks,
// weights exactly representable in bf16 (so the bf16 model and the fp32 reference start from the
// same values), next-token logprobs from either model, and the first place two runs part.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "device_model/model.hpp"
#include "model/config.hpp"
#include "model/model.hpp"
#include "model/sampling.hpp"
#include "model/weights.hpp"

namespace model_testing {

using mlpt::ref::ModelConfig;
using mlpt::ref::Weights;

// 4 layers (GDN, GDN, GDN, attention), hidden 64, 8 experts top-2: the GPU tests' model.
inline ModelConfig small_config(int64_t layers = 4) {
  nlohmann::json text = {
      {"model_type", "qwen3_5_moe_text"},
      {"vocab_size", 300},
      {"hidden_size", 64},
      {"num_hidden_layers", layers},
      {"num_attention_heads", 4},
      {"num_key_value_heads", 2},
      {"head_dim", 32},
      {"linear_num_key_heads", 2},
      {"linear_num_value_heads", 4},
      {"linear_key_head_dim", 16},
      {"linear_value_head_dim", 16},
      {"linear_conv_kernel_dim", 4},
      {"num_experts", 8},
      {"num_experts_per_tok", 2},
      {"moe_intermediate_size", 32},
      {"shared_expert_intermediate_size", 32},
      {"norm_topk_prob", true},
      {"rms_norm_eps", 1e-6},
      {"max_position_embeddings", 4096},
      {"rope_parameters",
       {{"rope_type", "default"}, {"rope_theta", 10000.0}, {"partial_rotary_factor", 0.25}}},
      {"initializer_range", 0.1},
      {"dtype", "bfloat16"}};
  return mlpt::ref::parse_model_config({{"model_type", "qwen3_5_moe"}, {"text_config", text}},
                                       "small_config");
}

// Weights whose bf16 tensors are exactly representable, so both sides start from the same values.
inline Weights<float> bf16_exact_weights(const ModelConfig& c, uint64_t seed) {
  Weights<float> w = mlpt::ref::init_weights<float>(c, seed);
  for (size_t i = 0; i < w.values.size(); ++i)
    if (!mlpt::ref::dev::is_fp32_tensor(w.layout, static_cast<int>(i)))
      for (float& x : w.values[i]) x = mlpt::ref::round_bf16(x);
  return w;
}

inline std::vector<int32_t> random_tokens(std::mt19937_64& rng, int64_t n, int64_t vocab) {
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (auto& x : t) x = static_cast<int32_t>(rng() % uint64_t(vocab));
  return t;
}

// Log-softmax of each row's target from fp32 logits [rows, V]; the last token of each segment gets 0.
inline std::vector<double> next_token_logprobs(const std::vector<float>& logits, int64_t V,
                                               const std::vector<int32_t>& tokens,
                                               const std::vector<int64_t>& offsets) {
  std::vector<double> lp(tokens.size(), 0.0);
  for (size_t s = 0; s + 1 < offsets.size(); ++s)
    for (int64_t t = offsets[s]; t + 1 < offsets[s + 1]; ++t)
      lp[size_t(t)] = mlpt::ref::token_logprob(logits.data() + t * V, V, tokens[size_t(t + 1)]);
  return lp;
}

// fp32 reference logits after every token of `tokens`, [n, V].
inline std::vector<float> cpu_logits(const Weights<float>& w, const std::vector<int32_t>& tokens) {
  mlpt::ref::ForwardBatch<float> fb;
  fb.tokens = tokens.data();
  fb.offsets = {0, static_cast<int64_t>(tokens.size())};
  const auto hidden = mlpt::ref::forward_hidden(w, fb);
  std::vector<float> logits(tokens.size() * size_t(w.config.vocab_size));
  mlpt::ref::lm_head_forward(w, static_cast<int64_t>(tokens.size()), hidden.data(), logits.data());
  return logits;
}

// The fp32 reference: logprobs, its routing record, and (when asked) the residual stream entering
// every layer and leaving the last, (L + 1) x N x H.
struct ReferenceRun {
  std::vector<double> logprobs;
  std::vector<int16_t> routed;
  std::vector<float> residual;
};
inline ReferenceRun reference_run(const Weights<float>& w, const std::vector<int32_t>& tokens,
                                  const std::vector<int64_t>& offsets, const int16_t* replay = nullptr) {
  ReferenceRun r;
  mlpt::ref::ForwardBatch<float> b;
  b.tokens = tokens.data();
  b.offsets = offsets;
  b.replay_experts = replay;
  r.routed.resize(tokens.size() * size_t(w.config.num_layers * w.config.experts_per_token));
  b.routed_experts = r.routed.data();
  b.layer_inputs = &r.residual;
  const auto hidden = mlpt::ref::forward_hidden(w, b);
  const int64_t V = w.config.vocab_size, N = static_cast<int64_t>(tokens.size());
  std::vector<float> logits(size_t(N * V));
  mlpt::ref::lm_head_forward(w, N, hidden.data(), logits.data());
  r.logprobs = next_token_logprobs(logits, V, tokens, offsets);
  return r;
}

// The device model's next-token logprobs from its final hidden states (LM head through the ops).
inline std::vector<double> device_logprobs(mlpt::ref::Ops& ops, const mlpt::ref::dev::DeviceWeights& w,
                                           const mlpt::ref::Buffer& hidden,
                                           const std::vector<int32_t>& tokens,
                                           const std::vector<int64_t>& offsets) {
  const int64_t V = w.config.vocab_size, H = w.config.hidden_size, N = static_cast<int64_t>(tokens.size());
  mlpt::ref::Buffer logits(ops, size_t(std::max<int64_t>(N * V, 1)) * 4);
  ops.logits_forward(N, V, H, hidden.as<mlpt::ref::bf16>(), w.bf(w.layout.lm_head), logits.as<float>());
  std::vector<float> host(size_t(N * V));
  ops.to_host(host.data(), logits.get(), host.size() * 4);
  return next_token_logprobs(host, V, tokens, offsets);
}

struct LogprobGap {
  double worst = 0, mean = 0;
  int64_t at = -1;  // the token of the worst gap
};
inline LogprobGap logprob_gap(const std::vector<double>& a, const std::vector<double>& b,
                              const std::vector<int64_t>& offsets) {
  LogprobGap g;
  int64_t n = 0;
  for (size_t s = 0; s + 1 < offsets.size(); ++s)
    for (int64_t t = offsets[s]; t + 1 < offsets[s + 1]; ++t) {
      const double d = std::fabs(a[size_t(t)] - b[size_t(t)]);
      if (d > g.worst) g.worst = d, g.at = t;
      g.mean += d, ++n;
    }
  g.mean /= double(std::max<int64_t>(n, 1));
  return g;
}

// Where two residual-stream traces ((L + 1) x N x H) first part: the first layer whose output
// differs anywhere by more than `rel` of that layer's scale (max |value| of the reference), and the
// first token there. Says "no divergence" when none does. For the message of a failing check.
inline std::string first_divergence(const std::vector<float>& got, const std::vector<float>& want,
                                    int64_t layers, int64_t N, int64_t H, double rel) {
  std::ostringstream out;
  if (got.size() != want.size() || want.size() != size_t((layers + 1) * N * H))
    return "traces differ in size (" + std::to_string(got.size()) + " vs " + std::to_string(want.size()) +
           ")";
  for (int64_t l = 0; l <= layers; ++l) {
    double scale = 0, worst = 0;
    const size_t base = size_t(l * N * H);
    for (int64_t i = 0; i < N * H; ++i) scale = std::max(scale, double(std::fabs(want[base + size_t(i)])));
    for (int64_t t = 0; t < N; ++t)
      for (int64_t c = 0; c < H; ++c) {
        const double d = std::fabs(double(got[base + size_t(t * H + c)]) - want[base + size_t(t * H + c)]);
        worst = std::max(worst, d);
        if (d > rel * scale) {
          out << (l == 0 ? std::string("the embedding") : "the output of layer " + std::to_string(l - 1))
              << " parts first at token " << t << ", channel " << c << ": " << got[base + size_t(t * H + c)]
              << " vs " << want[base + size_t(t * H + c)] << " (|Δ| " << d << " > " << rel << " x scale "
              << scale << ")";
          return out.str();
        }
      }
  }
  return "no divergence above " + std::to_string(rel) + " of each layer's scale";
}

// The fp32 reference's own spread, the yardstick of every bf16 tolerance: per token, the largest
// |Δ logprob| over `seeds` runs with every weight multiplied by (1 + ε·n), n ~ N(0, 1) and ε = 2^-9
// (bf16's unit roundoff), routing replayed. A bf16 model makes errors of that size at every store, so
// a token the fp32 model itself moves by s under them may move by a few s in bf16: random small
// models have such ill-conditioned tokens (a GDN head whose output is near zero feeds its output
// norm noise), and a fixed tolerance either misses defects or fails on them.
// With own_routing, each perturbed run routes itself, so near-tie routing flips count as spread
// too (for comparisons of two models that each route).
inline Weights<float> perturbed_weights(const Weights<float>& w, int seed) {
  Weights<float> p = w;
  std::mt19937_64 rng(1000 + uint64_t(seed));
  std::normal_distribution<float> n(0.f, 1.f);
  for (auto& t : p.values)
    for (float& x : t) x *= 1.f + std::ldexp(1.f, -9) * n(rng);
  return p;
}
inline std::vector<double> reference_sensitivity(const Weights<float>& w, const std::vector<int32_t>& tokens,
                                                 const std::vector<int64_t>& offsets, const int16_t* replay,
                                                 int seeds = 6, bool own_routing = false) {
  const ReferenceRun base = reference_run(w, tokens, offsets, replay);
  std::vector<double> s(tokens.size(), 0.0);
  for (int seed = 0; seed < seeds; ++seed) {
    const Weights<float> p = perturbed_weights(w, seed);
    const int16_t* routing = own_routing ? nullptr : replay ? replay : base.routed.data();
    const ReferenceRun r = reference_run(p, tokens, offsets, routing);
    for (size_t i = 0; i < s.size(); ++i) s[i] = std::max(s[i], std::fabs(r.logprobs[i] - base.logprobs[i]));
  }
  return s;
}

// The reference's gradient of <hidden, R> with routing replayed (every tensor but the LM head's),
// and its own spread per tensor under the same perturbations as reference_sensitivity: the lowest
// cosine and the largest relative change of norm between a perturbed run's gradient and the base.
struct GradientSpread {
  std::vector<std::vector<float>> base;
  std::vector<double> min_cosine, max_norm_change;
};
inline double cosine(const std::vector<float>& a, const std::vector<float>& b, double* na = nullptr,
                     double* nb = nullptr) {
  double dot = 0, x = 0, y = 0;
  for (size_t i = 0; i < a.size(); ++i)
    dot += double(a[i]) * b[i], x += double(a[i]) * a[i], y += double(b[i]) * b[i];
  if (na) *na = std::sqrt(x);
  if (nb) *nb = std::sqrt(y);
  return x == 0 && y == 0 ? 1.0 : dot / std::sqrt(x * y);
}
inline std::vector<std::vector<float>> reference_gradient(const Weights<float>& w,
                                                          const std::vector<int32_t>& tokens,
                                                          const std::vector<int64_t>& offsets,
                                                          const std::vector<float>& R,
                                                          const int16_t* replay) {
  mlpt::ref::ForwardBatch<float> fb;
  fb.tokens = tokens.data();
  fb.offsets = offsets;
  fb.replay_experts = replay;
  std::vector<float> inputs;
  fb.layer_inputs = &inputs;
  mlpt::ref::forward_hidden(w, fb);
  Weights<float> g = mlpt::ref::zeros_like_layout<float>(w.config);
  mlpt::ref::backward(w, fb, inputs, replay, R.data(), g, mlpt::ref::BackwardOptions{});
  return g.values;
}
inline GradientSpread reference_gradient_spread(const Weights<float>& w, const std::vector<int32_t>& tokens,
                                                const std::vector<int64_t>& offsets,
                                                const std::vector<float>& R, const int16_t* replay,
                                                int seeds = 6) {
  GradientSpread s;
  s.base = reference_gradient(w, tokens, offsets, R, replay);
  s.min_cosine.assign(s.base.size(), 1.0);
  s.max_norm_change.assign(s.base.size(), 0.0);
  for (int seed = 0; seed < seeds; ++seed) {
    const auto g = reference_gradient(perturbed_weights(w, seed), tokens, offsets, R, replay);
    for (size_t i = 0; i < g.size(); ++i) {
      double na = 0, nb = 0;
      s.min_cosine[i] = std::min(s.min_cosine[i], cosine(g[i], s.base[i], &na, &nb));
      s.max_norm_change[i] = std::max(s.max_norm_change[i], std::fabs(na - nb) / std::max(nb, 1e-30));
    }
  }
  return s;
}

// Tokens whose gap exceeds `factor` x their sensitivity + `floor`, the worst first (for messages).
struct Excess {
  int64_t count = 0, worst_token = -1;
  double worst_gap = 0, worst_sensitivity = 0, worst_ratio = 0;
};
inline Excess gaps_beyond_sensitivity(const std::vector<double>& a, const std::vector<double>& b,
                                      const std::vector<double>& sensitivity,
                                      const std::vector<int64_t>& offsets, double factor, double floor) {
  Excess e;
  for (size_t s = 0; s + 1 < offsets.size(); ++s)
    for (int64_t t = offsets[s]; t + 1 < offsets[s + 1]; ++t) {
      const double gap = std::fabs(a[size_t(t)] - b[size_t(t)]), sens = sensitivity[size_t(t)];
      const double ratio = (gap - floor) / std::max(sens, 1e-12);
      if (gap > factor * sens + floor) ++e.count;
      if (ratio > e.worst_ratio)
        e.worst_ratio = ratio, e.worst_token = t, e.worst_gap = gap, e.worst_sensitivity = sens;
    }
  return e;
}

// How many token-layer routings choose the same expert set.
inline int64_t same_routings(const std::vector<int16_t>& a, const std::vector<int16_t>& b, int64_t k) {
  int64_t same = 0;
  for (size_t i = 0; i + size_t(k) <= a.size(); i += size_t(k)) {
    std::vector<int16_t> x(a.begin() + i, a.begin() + i + k), y(b.begin() + i, b.begin() + i + k);
    std::sort(x.begin(), x.end()), std::sort(y.begin(), y.end());
    same += x == y;
  }
  return same;
}

}  // namespace model_testing
