// The device model's whole-model checks against the fp32 reference, for any backend: the CPU runs
// them on its bf16 emulation (tests/reference_cuda/model/device_model_test.cpp), the GPU on CUDA
// (tests/reference_cuda/backends/cuda/model_test.cpp). Catch assertions; call from a TEST_CASE.
#pragma once

#include <catch2/catch.hpp>

#include "device_model_fixtures.hpp"

namespace model_testing {

using mlpt::ref::bf16;
using mlpt::ref::Buffer;
using mlpt::ref::Ops;
namespace dev = mlpt::ref::dev;

// The packed batch the forward checks use: 200 random tokens in segments of 70, 1 and 129 (one
// crosses a GDN chunk, one is a single token), on bf16-exact weights, with the reference's run.
struct PackedCase {
  ModelConfig cfg = small_config();
  Weights<float> w = bf16_exact_weights(cfg, 42);
  std::vector<int64_t> offsets{0, 70, 71, 200};
  std::vector<int32_t> tokens;
  ReferenceRun ref;
  std::vector<double> sensitivity;  // the reference's own, routing replayed
  PackedCase() {
    std::mt19937_64 rng(1);
    tokens = random_tokens(rng, offsets.back(), cfg.vocab_size);
    ref = reference_run(w, tokens, offsets);
    sensitivity = reference_sensitivity(w, tokens, offsets, ref.routed.data());
  }
  // A batch of it for the device model, the reference's routing replayed.
  dev::DeviceBatch batch() const {
    dev::DeviceBatch b;
    b.tokens = tokens;
    b.offsets = offsets;
    b.replay_experts = ref.routed.data();
    return b;
  }
};

// Bounds of the bf16 model against the fp32 reference, with the reference's routing replayed so
// both compute the same function, per token from the reference's own sensitivity s_t (its spread
// under perturbations of bf16's size, device_model_fixtures.hpp): |Δ_t| <= 4 s_t + 0.01. Measured on
// this model: the largest Δ_t / s_t is about 1.5 (token 116 moves 0.75 in bf16 and 0.4–0.7 in fp32
// under 2^-9 noise), well-conditioned tokens stay under 0.01. A composition defect (a missing,
// doubled or misplaced op) moves most tokens by O(0.1–1) and fails this at once.
inline void check_forward_against_reference(Ops& ops) {
  const PackedCase p;
  const auto& [cfg, w, offsets, tokens, ref, sensitivity] = p;
  double mean_sensitivity = 0;
  for (double x : sensitivity) mean_sensitivity += x / double(sensitivity.size());

  const dev::DeviceWeights d = dev::upload_weights(ops, w);
  auto ws = dev::make_workspace();
  dev::DeviceBatch b = p.batch();
  std::vector<int16_t> routed(ref.routed.size());
  b.routed_experts = routed.data();
  dev::LayerTrace trace;
  Buffer hidden;
  for (const bool chunked : {true, false}) {
    b.chunked = chunked;
    dev::forward_hidden(ops, d, b, *ws, hidden, nullptr, &trace);
    const auto got = device_logprobs(ops, d, hidden, tokens, offsets);
    const LogprobGap g = logprob_gap(got, ref.logprobs, offsets);
    const Excess e = gaps_beyond_sensitivity(got, ref.logprobs, sensitivity, offsets, 4.0, 0.01);
    INFO((chunked ? "chunked" : "recurrent")
         << " GDN: max |Δ logprob| " << g.worst << " at token " << g.at << ", mean " << g.mean
         << "; worst against sensitivity: token " << e.worst_token << " Δ " << e.worst_gap << " vs s "
         << e.worst_sensitivity << " (mean s " << mean_sensitivity << ")"
         << "; " << e.count << " tokens beyond 4 s + 0.01; "
         << first_divergence(trace.residual, ref.residual, cfg.num_layers, offsets.back(), cfg.hidden_size,
                             0.05));
    CHECK(routed == ref.routed);  // replayed
    CHECK(e.count == 0);
    CHECK(g.mean < 3 * mean_sensitivity + 0.005);
  }

  // Its own routing agrees with the reference's wherever the reference's top-k margin is clear of
  // bf16 noise; near-ties may flip (the flipped share is reported, and bounded loosely).
  b.replay_experts = nullptr;
  b.chunked = true;
  dev::forward_hidden(ops, d, b, *ws, hidden, nullptr);
  const int64_t k = cfg.experts_per_token, rows = int64_t(routed.size()) / k;
  const int64_t same = same_routings(routed, ref.routed, k);
  INFO(same << " of " << rows << " token-layer routings agree");
  CHECK(same >= rows * 9 / 10);
}

inline void check_gradient_against_reference(Ops& ops) {
  const ModelConfig cfg = small_config();
  const Weights<float> w = bf16_exact_weights(cfg, 7);
  std::mt19937_64 rng(2);
  const std::vector<int64_t> offsets{0, 90, 150};
  const auto tokens = random_tokens(rng, offsets.back(), cfg.vocab_size);
  const int64_t N = offsets.back(), H = cfg.hidden_size;
  // Loss <hidden, R>: d(hidden) = R, bf16-exact so both sides start from the same gradient.
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<float> R(size_t(N * H));
  for (float& x : R) x = mlpt::ref::round_bf16(normal(rng));

  std::vector<int16_t> routed = reference_run(w, tokens, offsets).routed;
  const GradientSpread ref = reference_gradient_spread(w, tokens, offsets, R, routed.data());

  const dev::DeviceWeights d = dev::upload_weights(ops, w);
  auto ws = dev::make_workspace();
  dev::DeviceBatch b;
  b.tokens = tokens;
  b.offsets = offsets;
  b.replay_experts = routed.data();
  Buffer hidden, saved;
  dev::forward_hidden(ops, d, b, *ws, hidden, &saved);
  std::vector<Buffer> grads;
  for (const auto& t : d.layout.tensors) {
    grads.emplace_back(ops, size_t(std::max<int64_t>(t.numel(), 1)) * 4);
    ops.zero(grads.back().get(), size_t(t.numel()) * 4);
  }
  std::vector<bf16> dh(R.size());
  for (size_t i = 0; i < R.size(); ++i) dh[i] = mlpt::ref::to_bf16(R[i]);
  Buffer d_hidden(ops, dh.size() * 2);
  ops.to_device(d_hidden.get(), dh.data(), dh.size() * 2);
  dev::backward(ops, d, b, saved, routed.data(), d_hidden.as<bf16>(), grads, true, *ws);

  // Per tensor, against the reference's own spread under bf16-sized perturbations (the lowest
  // cosine c_min and largest relative norm change n_max of 6 perturbed runs): 1 − cos <= 4 (1 − c_min)
  // + 0.002 and the relative norm change <= 4 n_max + 0.01. Measured: the bf16 model stays inside
  // 1–2x the fp32 model's own spread; a wrong or missing gradient term fails by far more.
  for (size_t i = 0; i < d.layout.tensors.size(); ++i) {
    if (static_cast<int>(i) == d.layout.lm_head) continue;  // the loss's, not the model's
    std::vector<float> got(ref.base[i].size());
    ops.to_host(got.data(), grads[i].get(), got.size() * 4);
    double n_dev = 0, n_ref = 0;
    const double c = cosine(got, ref.base[i], &n_dev, &n_ref);
    INFO(d.layout.tensors[i].name << ": cosine " << c << " (reference's own lowest " << ref.min_cosine[i]
                                  << "), |device| " << n_dev << " |reference| " << n_ref << " (own spread "
                                  << ref.max_norm_change[i] << ")");
    CHECK(1 - c <= 4 * (1 - ref.min_cosine[i]) + 0.002);
    CHECK(std::fabs(n_dev - n_ref) <= (4 * ref.max_norm_change[i] + 0.01) * n_ref + 1e-6);
  }
}

inline void check_decode_equals_full_forward(Ops& ops) {
  const ModelConfig cfg = small_config();
  const Weights<float> w = bf16_exact_weights(cfg, 9);
  std::mt19937_64 rng(4);
  const int64_t n = 80, prompt = 67;
  const auto tokens = random_tokens(rng, n, cfg.vocab_size);
  const dev::DeviceWeights d = dev::upload_weights(ops, w);
  auto ws = dev::make_workspace();

  // One forward of the whole sequence; its routing is replayed below so both see one function.
  dev::DeviceBatch full;
  full.tokens = tokens;
  full.offsets = {0, n};
  std::vector<int16_t> routed(size_t(n * cfg.num_layers * cfg.experts_per_token));
  full.routed_experts = routed.data();
  Buffer hidden;
  dev::forward_hidden(ops, d, full, *ws, hidden, nullptr);
  const auto want = device_logprobs(ops, d, hidden, tokens, full.offsets);

  dev::KvCache kv(ops, cfg, 16, 8);
  dev::DeviceSequenceState st(ops, cfg);
  std::vector<double> got(size_t(n), 0.0);
  const int64_t per = cfg.num_layers * cfg.experts_per_token, V = cfg.vocab_size;
  for (int64_t at = 0; at < n;) {
    const int64_t len = at == 0 ? prompt : 1;
    st.blocks.clear();
    for (int64_t i = 0; i * kv.block_size < at + len; ++i) st.blocks.push_back(int32_t(i));
    dev::DeviceBatch step;
    step.tokens.assign(tokens.begin() + at, tokens.begin() + at + len);
    step.offsets = {0, len};
    step.states = {&st};
    step.kv = &kv;
    step.replay_experts = routed.data() + at * per;
    dev::forward_hidden(ops, d, step, *ws, hidden, nullptr);
    Buffer logits(ops, size_t(len * V) * 4);
    ops.logits_forward(len, V, cfg.hidden_size, hidden.as<bf16>(), d.bf(d.layout.lm_head),
                       logits.as<float>());
    std::vector<float> host(size_t(len * V));
    ops.to_host(host.data(), logits.get(), host.size() * 4);
    for (int64_t t = 0; t < len && at + t + 1 < n; ++t)
      got[size_t(at + t)] = mlpt::ref::token_logprob(host.data() + t * V, V, tokens[size_t(at + t + 1)]);
    at += len;
  }
  CHECK(st.length == n);
  // The two orders of work differ in GDN form (chunked over the prompt, recurrent per decode step)
  // and in fp32 summation only; the bf16 stores are the same values up to those: bound 0.02.
  const LogprobGap g = logprob_gap(got, want, full.offsets);
  INFO("decode vs full: max |Δ logprob| " << g.worst << " at " << g.at << ", mean " << g.mean);
  CHECK(g.worst < 0.02);
}

// One backend against another on the same function (the CPU's routing replayed on both): the GPU
// against the CPU's bf16 emulation, which rounds at the same points, so what remains is the order
// of fp32 sums (and fp32 exp/log ulps). Those flip a bf16 rounding now and then, a perturbation of
// bf16's size at one store, so the bound is again the reference's sensitivity s_t, at half the
// factor of the fp32 comparison: |Δ_t| <= 2 s_t + 2e-3 (an estimate until measured on a GPU); the
// per-layer residuals must not part by 2% of a layer's scale (the first place they do is printed).
inline void check_against_oracle(Ops& device, Ops& oracle) {
  const PackedCase p;
  const auto& [cfg, w, offsets, tokens, ref, sensitivity] = p;
  struct Run {
    std::vector<double> logprobs;
    dev::LayerTrace trace;
  };
  auto run = [&](Ops& ops) {
    const dev::DeviceWeights d = dev::upload_weights(ops, w);
    auto ws = dev::make_workspace();
    const dev::DeviceBatch b = p.batch();
    Run r;
    Buffer hidden;
    dev::forward_hidden(ops, d, b, *ws, hidden, nullptr, &r.trace);
    r.logprobs = device_logprobs(ops, d, hidden, tokens, offsets);
    return r;
  };
  const Run got = run(device), want = run(oracle);
  const LogprobGap g = logprob_gap(got.logprobs, want.logprobs, offsets);
  const Excess e = gaps_beyond_sensitivity(got.logprobs, want.logprobs, sensitivity, offsets, 2.0, 2e-3);
  const std::string where = first_divergence(got.trace.residual, want.trace.residual, cfg.num_layers,
                                             offsets.back(), cfg.hidden_size, 0.02);
  INFO(device.name() << " vs " << oracle.name() << ": max |Δ logprob| " << g.worst << " at token " << g.at
                     << ", mean " << g.mean << "; " << e.count << " tokens beyond 2 s + 2e-3 (worst: token "
                     << e.worst_token << " Δ " << e.worst_gap << " vs s " << e.worst_sensitivity << "); "
                     << where);
  CHECK(e.count == 0);
  CHECK(where.rfind("no divergence", 0) == 0);
}

}  // namespace model_testing
