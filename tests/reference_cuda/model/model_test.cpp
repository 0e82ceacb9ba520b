// The whole model: gradient against float64 finite differences, chunked vs recurrent GDN, prefill +
// decode vs one forward, packing, R3 replay, initialisation, checkpoints in both layouts.
#include <catch2/catch.hpp>

#include <cmath>
#include <filesystem>

#include "model/model.hpp"
#include "model/parallel/shard_weights.hpp"
#include "model/safetensors.hpp"
#include "model/scoring.hpp"
#include "model/weights.hpp"
#include "mlpt/sdk/error.hpp"
#include "fd.hpp"
#include "model_fixtures.hpp"
#include "tests/support/test_util.hpp"

using namespace mlpt::ref;
using mlpt_test::TempDir;

namespace {

std::vector<int32_t> some_tokens(size_t n, int64_t vocab, uint64_t seed) {
  std::vector<int32_t> t(n);
  uint64_t x = seed * 2654435761u + 1;
  for (auto& v : t) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    v = static_cast<int32_t>((x >> 33) % static_cast<uint64_t>(vocab));
  }
  return t;
}

template <class T>
std::vector<T> all_logits(const Weights<T>& w, ForwardBatch<T>& b) {
  std::vector<T> h = forward_hidden(w, b);
  std::vector<T> logits(static_cast<size_t>(b.num_tokens() * w.config.vocab_size));
  lm_head_forward(w, b.num_tokens(), h.data(), logits.data());
  return logits;
}

// Random init with every zero-initialised weight (norms) moved off zero, so their gradients matter.
template <class T>
Weights<T> perturbed_init(const ModelConfig& c, uint64_t seed, double scale = 0.02) {
  Weights<T> w = init_weights<T>(c, seed);
  for (size_t i = 0; i < w.values.size(); ++i) {
    auto noise = mlpt_test::random_vector(w.values[i].size(), seed + 100 + i, 0.1);
    if (w.layout.tensors[i].init == Init::zeros || w.layout.tensors[i].init == Init::ones)
      for (size_t j = 0; j < noise.size(); ++j) w.values[i][j] += static_cast<T>(noise[j]);
    if (w.layout.tensors[i].init == Init::normal)  // larger weights: gradients well above FD noise
      for (auto& v : w.values[i]) v = static_cast<T>(v * (scale / 0.02));
  }
  return w;
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, static_cast<double>(std::fabs(a[i] - b[i])));
  return m;
}

}  // namespace

TEST_CASE("whole-model gradient matches float64 finite differences (every tensor)") {
  ModelConfig c = mlpt_test::micro_config();
  Weights<double> w = perturbed_init<double>(c, 7, 0.2);
  std::vector<int32_t> tokens = some_tokens(12, c.vocab_size, 3);
  ForwardBatch<double> b;
  b.tokens = tokens.data();
  b.offsets = {0, 5, 12};
  std::vector<double> layer_inputs;
  std::vector<int16_t> experts(12 * c.num_layers * c.experts_per_token);
  b.layer_inputs = &layer_inputs;
  b.routed_experts = experts.data();
  std::vector<double> hidden = forward_hidden(w, b);
  const int64_t N = 12, H = c.hidden_size, V = c.vocab_size;
  std::vector<double> C = mlpt_test::random_vector(N * V, 99);  // loss = Σ C ⊙ logits

  // Analytic: d_hidden = C · W_lm, dW_lm = Cᵀ · hidden, then the model backward.
  Weights<double> grads = zeros_like_layout<double>(c);
  std::vector<double> d_hidden(N * H, 0.0);
  const double* lm = w[w.layout.lm_head];
  for (int64_t t = 0; t < N; ++t)
    for (int64_t v = 0; v < V; ++v)
      for (int64_t i = 0; i < H; ++i) {
        d_hidden[t * H + i] += C[t * V + v] * lm[v * H + i];
        grads[w.layout.lm_head][v * H + i] += C[t * V + v] * hidden[t * H + i];
      }
  backward(w, b, layer_inputs, experts.data(), d_hidden.data(), grads, BackwardOptions{true});

  // Finite differences with the routing held fixed (replay): top-k itself is not differentiable.
  auto loss = [&] {
    ForwardBatch<double> fb;
    fb.tokens = tokens.data();
    fb.offsets = b.offsets;
    fb.replay_experts = experts.data();
    std::vector<double> l = all_logits(w, fb);
    return mlpt_test::dot(l, C);
  };
  for (size_t i = 0; i < w.values.size(); ++i) {
    std::vector<double>& x = w.values[i];
    std::vector<double> g = grads.values[i];
    bool any = false;
    for (double v : g) any |= v != 0.0;
    INFO(w.layout.tensors[i].name);
    CHECK(any);
    mlpt_test::check_gradient(w.layout.tensors[i].name, x, g, loss, 2e-5, 6, 1e-5);
  }
}

TEST_CASE("chunked and recurrent GDN give the same model output over several chunks") {
  ModelConfig c = mlpt_test::micro_config();
  Weights<float> w = perturbed_init<float>(c, 11, 0.1);
  std::vector<int32_t> tokens = some_tokens(200, c.vocab_size, 5);
  ForwardBatch<float> chunked, recurrent;
  chunked.tokens = recurrent.tokens = tokens.data();
  chunked.offsets = recurrent.offsets = {0, 150, 200};  // 150 spans three 64-token chunks
  recurrent.gdn_mode = GdnMode::recurrent;
  auto a = forward_hidden(w, chunked), r = forward_hidden(w, recurrent);
  double d = max_abs_diff(a, r);
  INFO("max |chunked - recurrent| = " << d);
  CHECK(d < 1e-4);
}

TEST_CASE("prefill then token-by-token decode equals one forward over the sequence") {
  ModelConfig c = mlpt_test::micro_config();
  Weights<float> w = perturbed_init<float>(c, 13, 0.1);
  std::vector<int32_t> tokens = some_tokens(90, c.vocab_size, 6);
  ForwardBatch<float> full;
  full.tokens = tokens.data();
  full.offsets = {0, 90};
  std::vector<float> ref = all_logits(w, full);
  const int64_t V = c.vocab_size;

  SequenceCache<float> cache(c);
  double worst = 0;
  int64_t at = 0;
  for (int64_t n : {70, 1, 1, 5, 1, 12}) {  // prefill 70 (two chunks), decode, a short suffix, ...
    ForwardBatch<float> step;
    step.tokens = tokens.data() + at;
    step.offsets = {0, n};
    step.caches = {&cache};
    std::vector<float> l = all_logits(w, step);
    for (int64_t t = 0; t < n; ++t)
      for (int64_t v = 0; v < V; ++v)
        worst = std::max(worst, static_cast<double>(std::fabs(l[t * V + v] - ref[(at + t) * V + v])));
    at += n;
  }
  CHECK(cache.length == 90);
  INFO("max logit difference " << worst);
  CHECK(worst < 1e-4);
}

TEST_CASE("packed sequences are independent: state, conv window and attention reset at boundaries") {
  ModelConfig c = mlpt_test::micro_config();
  Weights<float> w = perturbed_init<float>(c, 17, 0.1);
  std::vector<int32_t> tokens = some_tokens(30, c.vocab_size, 8);
  ForwardBatch<float> packed;
  packed.tokens = tokens.data();
  packed.offsets = {0, 11, 30};
  std::vector<float> both = forward_hidden(w, packed);
  for (int s = 0; s < 2; ++s) {
    ForwardBatch<float> one;
    one.tokens = tokens.data() + packed.offsets[s];
    one.offsets = {0, packed.offsets[s + 1] - packed.offsets[s]};
    std::vector<float> h = forward_hidden(w, one);
    std::vector<float> slice(both.begin() + packed.offsets[s] * c.hidden_size,
                             both.begin() + packed.offsets[s + 1] * c.hidden_size);
    CHECK(max_abs_diff(h, slice) < 1e-5);
  }
}

TEST_CASE("routing replay reproduces the recorded experts and the same output") {
  ModelConfig c = mlpt_test::micro_config();
  Weights<float> w = perturbed_init<float>(c, 19, 0.3);
  std::vector<int32_t> tokens = some_tokens(20, c.vocab_size, 9);
  const size_t per = c.num_layers * c.experts_per_token;
  std::vector<int16_t> rec(20 * per), rec2(20 * per);
  ForwardBatch<float> a;
  a.tokens = tokens.data();
  a.offsets = {0, 20};
  a.routed_experts = rec.data();
  std::vector<float> h = forward_hidden(w, a);
  ForwardBatch<float> b = a;
  b.replay_experts = rec.data();
  b.routed_experts = rec2.data();
  CHECK(forward_hidden(w, b) == h);
  CHECK(rec2 == rec);
  // Replaying other experts changes the output; out-of-range experts are refused with the place.
  std::vector<int16_t> other = rec;
  for (auto& e : other) e = static_cast<int16_t>((e + 1) % c.num_experts);
  b.replay_experts = other.data();
  CHECK(max_abs_diff(forward_hidden(w, b), h) > 1e-4);
  other[3] = 99;
  try {
    forward_hidden(w, b);
    FAIL("out-of-range replay must fail");
  } catch (const mlpt::sdk::Error& e) {
    CHECK_THAT(e.what(), Catch::Contains("expert 99 is outside [0, 4)"));
  }
}

namespace {

// A shared prefix computed once (ForwardBatch::parents) against the same sequences unshared: every
// sequence's final hidden states, and the gradient of loss = Σ C ⊙ hidden over the unshared rows.
// Sequences: three continuations of a 70-token prefix (two GDN chunks and the conv window): +9
// tokens, +0 (the sequence is exactly the prefix) and +75 (across a chunk boundary), and a 13-token
// sequence that shares nothing, placed between them so the forked layers handle interleaved runs.
template <class T>
std::pair<double, double> shared_prefix_differences(GdnMode mode) {
  ModelConfig c = mlpt_test::micro_config();
  Weights<T> w = perturbed_init<T>(c, 23, 0.2);
  const int64_t P = 70, H = c.hidden_size;
  const std::vector<int64_t> extra = {9, 0, 75};
  std::vector<int32_t> prefix = some_tokens(P, c.vocab_size, 31), other = some_tokens(13, c.vocab_size, 32);
  std::vector<std::vector<int32_t>> suffix;
  for (size_t i = 0; i < extra.size(); ++i) suffix.push_back(some_tokens(extra[i], c.vocab_size, 40 + i));

  // Unshared: prefix+s0, prefix+s1, other, prefix+s2. Shared: prefix, s0, s1, other, s2.
  std::vector<int32_t> flat, packed;
  std::vector<int64_t> flat_off{0}, packed_off{0, P};
  std::vector<std::vector<int64_t>> rows;  // per unshared sequence: its rows in the shared batch
  packed.insert(packed.end(), prefix.begin(), prefix.end());
  auto add = [&](const std::vector<int32_t>* sfx) {
    std::vector<int64_t> r;
    if (sfx) {
      flat.insert(flat.end(), prefix.begin(), prefix.end());
      for (int64_t i = 0; i < P; ++i) r.push_back(i);
    }
    const std::vector<int32_t>& own = sfx ? *sfx : other;
    flat.insert(flat.end(), own.begin(), own.end());
    for (size_t i = 0; i < own.size(); ++i) r.push_back(static_cast<int64_t>(packed.size() + i));
    packed.insert(packed.end(), own.begin(), own.end());
    flat_off.push_back(static_cast<int64_t>(flat.size()));
    packed_off.push_back(static_cast<int64_t>(packed.size()));
    rows.push_back(r);
  };
  add(&suffix[0]);
  add(&suffix[1]);
  add(nullptr);
  add(&suffix[2]);
  const int64_t N = static_cast<int64_t>(flat.size()), M = static_cast<int64_t>(packed.size());
  const size_t per = static_cast<size_t>(c.num_layers * c.experts_per_token);

  ForwardBatch<T> full, shared;
  full.tokens = flat.data();
  full.offsets = flat_off;
  full.gdn_mode = shared.gdn_mode = mode;
  shared.tokens = packed.data();
  shared.offsets = packed_off;
  shared.parents = {-1, 0, 0, -1, 0};
  std::vector<T> in_full, in_shared;
  std::vector<int16_t> ex_full(N * per), ex_shared(M * per);
  full.layer_inputs = &in_full;
  full.routed_experts = ex_full.data();
  shared.layer_inputs = &in_shared;
  shared.routed_experts = ex_shared.data();
  std::vector<T> h_full = forward_hidden(w, full), h_shared = forward_hidden(w, shared);

  std::vector<double> C = mlpt_test::random_vector(N * H, 77);
  std::vector<T> d_full(N * H), d_shared(M * H, T(0));
  double hidden_diff = 0, scale = 0;
  for (size_t s = 0; s < rows.size(); ++s)
    for (size_t i = 0; i < rows[s].size(); ++i) {
      const int64_t f = flat_off[s] + static_cast<int64_t>(i), r = rows[s][i];
      for (int64_t j = 0; j < H; ++j) {
        hidden_diff = std::max(hidden_diff, std::fabs(static_cast<double>(h_full[f * H + j] - h_shared[r * H + j])));
        d_full[f * H + j] = static_cast<T>(C[f * H + j]);
        d_shared[r * H + j] += static_cast<T>(C[f * H + j]);  // a prefix row carries every sequence's
      }
    }
  Weights<T> g_full = zeros_like_layout<T>(c), g_shared = zeros_like_layout<T>(c);
  backward(w, full, in_full, ex_full.data(), d_full.data(), g_full, BackwardOptions{true});
  backward(w, shared, in_shared, ex_shared.data(), d_shared.data(), g_shared, BackwardOptions{true});
  double grad_diff = 0;
  for (size_t i = 0; i < g_full.values.size(); ++i)
    for (size_t j = 0; j < g_full.values[i].size(); ++j) {
      scale = std::max(scale, std::fabs(static_cast<double>(g_full.values[i][j])));
      grad_diff = std::max(grad_diff, std::fabs(static_cast<double>(g_full.values[i][j] - g_shared.values[i][j])));
    }
  return {hidden_diff, grad_diff / scale};
}

}  // namespace

TEST_CASE("a shared prefix computed once gives the unshared outputs and gradients (float64, float32)") {
  for (GdnMode mode : {GdnMode::chunked, GdnMode::recurrent}) {
    auto [h64, g64] = shared_prefix_differences<double>(mode);
    INFO("float64, " << (mode == GdnMode::chunked ? "chunked" : "recurrent") << ": max |hidden diff| " << h64
                     << ", max |grad diff| / max |grad| " << g64);
    CHECK(h64 < 1e-12);
    CHECK(g64 < 1e-11);
  }
  auto [h32, g32] = shared_prefix_differences<float>(GdnMode::chunked);
  INFO("float32: max |hidden diff| " << h32 << ", max |grad diff| / max |grad| " << g32);
  CHECK(h32 < 5e-5);  // fp32: the prefix rows are the same sums, the continuations chunk from another start
  CHECK(g32 < 5e-5);
}

TEST_CASE("parents are checked: an earlier segment without a parent, never with caches") {
  ModelConfig c = mlpt_test::micro_config();
  Weights<float> w = init_weights<float>(c, 3);
  std::vector<int32_t> tokens = some_tokens(9, c.vocab_size, 4);
  ForwardBatch<float> b;
  b.tokens = tokens.data();
  b.offsets = {0, 3, 6, 9};
  for (std::vector<int32_t> bad : {std::vector<int32_t>{-1, 2, -1}, {-1, 0, 1}, {0, -1, -1}, {-1, 0}}) {
    b.parents = bad;
    CHECK_THROWS_AS(forward_hidden(w, b), mlpt::sdk::Error);
  }
  SequenceCache<float> cache(c);
  b.parents = {-1, 0, -1};
  b.caches = {nullptr, &cache, nullptr};
  CHECK_THROWS_AS(forward_hidden(w, b), mlpt::sdk::Error);
}

TEST_CASE("initialisation follows the spec and depends only on the seed") {
  ModelConfig c = mlpt_test::micro_config();
  Weights<float> a = init_weights<float>(c, 42), b = init_weights<float>(c, 42), d = init_weights<float>(c, 43);
  CHECK(a.values == b.values);
  CHECK(a.values[a.layout.embed] != d.values[d.layout.embed]);
  const LayerTensors& g = a.layout.layers[0];
  for (float v : a.values[g.input_norm]) CHECK(v == 0.0f);
  for (float v : a.values[g.gdn.norm]) CHECK(v == 1.0f);
  for (float v : a.values[g.gdn.dt_bias]) CHECK(v == 1.0f);
  for (float v : a.values[g.gdn.a_log]) {
    CHECK(v >= std::log(0.01f) - 1e-6f);
    CHECK(v <= std::log(16.0f) + 1e-6f);
  }
  for (float v : a.values[a.layout.layers[3].attn.q_norm]) CHECK(v == 0.0f);
  double ss = 0;
  for (float v : a.values[a.layout.embed]) ss += v * v;
  CHECK(std::sqrt(ss / a.values[a.layout.embed].size()) == Approx(0.02).epsilon(0.15));
}

TEST_CASE("a saved checkpoint reloads to identical logits, bf16 reloads to the rounded weights") {
  ModelConfig c = mlpt_test::micro_config();
  Weights<float> w = perturbed_init<float>(c, 23, 0.1);
  TempDir dir("ckpt");
  save_checkpoint(dir / "f32", w, Dtype::f32);
  save_checkpoint(dir / "bf16", w, Dtype::bf16, 4096);  // sharded
  CHECK(std::filesystem::exists(dir / "bf16/model.safetensors.index.json"));
  std::vector<int32_t> tokens = some_tokens(16, c.vocab_size, 10);
  ForwardBatch<float> b;
  b.tokens = tokens.data();
  b.offsets = {0, 16};
  Weights<float> r = load_weights<float>(dir / "f32");
  CHECK(r.values == w.values);
  CHECK(all_logits(r, b) == all_logits(w, b));
  Weights<float> h = load_weights<float>(dir / "bf16");
  for (size_t i = 0; i < w.values.size(); ++i)
    for (size_t j = 0; j < w.values[i].size(); ++j) REQUIRE(h.values[i][j] == bf16_to_float(float_to_bf16(w.values[i][j])));
}

TEST_CASE("Qwen3-Next checkpoints (fused in_proj_qkvz / in_proj_ba, per-expert tensors) load to the same model") {
  ModelConfig c = mlpt_test::micro_config();
  Weights<float> w = perturbed_init<float>(c, 29, 0.1);
  // Write the Next layout by hand from the Qwen3.5 weights.
  const int64_t H = c.hidden_size, dk = c.gdn_key_dim, dv = c.gdn_value_dim, Hk = c.gdn_key_heads;
  const int64_t r = c.gdn_value_heads / Hk, I = c.moe_intermediate;
  std::vector<std::vector<float>> store;
  std::vector<TensorToWrite> out;
  auto emit = [&](std::string name, std::vector<int64_t> shape, std::vector<float> v) {
    store.push_back(std::move(v));
    out.push_back({std::move(name), std::move(shape), nullptr, Dtype::f32});
  };
  auto rows = [&](const float* src, int64_t row, int64_t n) { return std::vector<float>(src + row * H, src + (row + n) * H); };
  for (size_t i = 0; i < w.layout.tensors.size(); ++i) {
    const auto& spec = w.layout.tensors[i];
    std::string name = spec.name;
    const std::string p35 = "model.language_model.";
    if (name.rfind(p35, 0) == 0) name = "model." + name.substr(p35.size());
    auto ends = [&](const std::string& s) { return name.size() > s.size() && name.substr(name.size() - s.size()) == s; };
    std::string stem = name.substr(0, name.rfind('.') + 1);
    if (ends("in_proj_qkv.weight")) {
      const float* qkv = w[static_cast<int>(i)];
      const float* z = w[static_cast<int>(i) + 1];
      std::vector<float> fused;
      for (int64_t g = 0; g < Hk; ++g) {
        for (auto part : {rows(qkv, g * dk, dk), rows(qkv, c.key_dim() + g * dk, dk),
                          rows(qkv, 2 * c.key_dim() + g * r * dv, r * dv), rows(z, g * r * dv, r * dv)})
          fused.insert(fused.end(), part.begin(), part.end());
      }
      std::string base = name.substr(0, name.size() - std::string("in_proj_qkv.weight").size());
      emit(base + "in_proj_qkvz.weight", {static_cast<int64_t>(fused.size()) / H, H}, fused);
    } else if (ends("in_proj_b.weight")) {
      const float* bw = w[static_cast<int>(i)];
      const float* aw = w[static_cast<int>(i) + 1];
      std::vector<float> fused;
      for (int64_t g = 0; g < Hk; ++g)
        for (auto part : {rows(bw, g * r, r), rows(aw, g * r, r)}) fused.insert(fused.end(), part.begin(), part.end());
      std::string base = name.substr(0, name.size() - std::string("in_proj_b.weight").size());
      emit(base + "in_proj_ba.weight", {2 * c.gdn_value_heads, H}, fused);
    } else if (ends("in_proj_z.weight") || ends("in_proj_a.weight")) {
      continue;  // fused above
    } else if (ends("experts.gate_up_proj")) {
      const float* gu = w[static_cast<int>(i)];
      for (int64_t e = 0; e < c.num_experts; ++e) {
        std::string ep = name.substr(0, name.size() - std::string("gate_up_proj").size()) + std::to_string(e) + ".";
        emit(ep + "gate_proj.weight", {I, H}, std::vector<float>(gu + e * 2 * I * H, gu + e * 2 * I * H + I * H));
        emit(ep + "up_proj.weight", {I, H}, std::vector<float>(gu + e * 2 * I * H + I * H, gu + (e + 1) * 2 * I * H));
      }
    } else if (ends("experts.down_proj")) {
      const float* d = w[static_cast<int>(i)];
      for (int64_t e = 0; e < c.num_experts; ++e) {
        std::string ep = name.substr(0, name.size() - std::string("down_proj").size()) + std::to_string(e) + ".";
        emit(ep + "down_proj.weight", {H, I}, std::vector<float>(d + e * H * I, d + (e + 1) * H * I));
      }
    } else {
      emit(name, spec.shape, w.values[i]);
    }
  }
  for (size_t i = 0; i < out.size(); ++i) out[i].values = store[i].data();
  TempDir dir("next");
  write_checkpoint(dir.str(), out);
  nlohmann::json cfg = mlpt_test::micro_config_json()["text_config"];
  cfg["model_type"] = "qwen3_next";
  write_file_atomic(dir / "config.json", cfg.dump());
  Weights<float> loaded = load_weights<float>(dir.str());
  CHECK(loaded.config.variant == CheckpointVariant::qwen3_next);
  for (size_t i = 0; i < w.values.size(); ++i) {
    INFO(w.layout.tensors[i].name);
    CHECK(loaded.values[i] == w.values[i]);
  }
}

TEST_CASE("bad checkpoints are refused with the tensor or file named") {
  ModelConfig c = mlpt_test::micro_config();
  Weights<float> w = init_weights<float>(c, 1);
  TempDir dir("badckpt");
  try {
    load_weights<float>(dir.str());
    FAIL();
  } catch (const mlpt::sdk::Error& e) {
    CHECK_THAT(e.what(), Catch::Contains("config.json"));
  }
  save_checkpoint(dir.str(), w, Dtype::f32);
  // A config that disagrees with the tensors: the first mismatching tensor is named with both shapes.
  nlohmann::json cfg = mlpt_test::micro_config_json();
  cfg["text_config"]["moe_intermediate_size"] = 6;
  write_file_atomic(dir / "config.json", cfg.dump());
  try {
    load_weights<float>(dir.str());
    FAIL();
  } catch (const mlpt::sdk::Error& e) {
    CHECK_THAT(e.what(), Catch::Contains("layers.0.mlp.experts.gate_up_proj' has shape [4, 16, 16], the model config needs [4, 12, 16]"));
  }
  // A missing tensor.
  std::vector<TensorToWrite> some;
  for (size_t i = 0; i + 1 < w.values.size(); ++i)
    some.push_back({w.layout.tensors[i].name, w.layout.tensors[i].shape, w.values[i].data(), Dtype::f32});
  write_checkpoint(dir.str(), some);
  write_file_atomic(dir / "config.json", mlpt_test::micro_config_json().dump());
  try {
    load_weights<float>(dir.str());
    FAIL();
  } catch (const mlpt::sdk::Error& e) {
    CHECK(e.code() == MLPT_NOT_FOUND);
    CHECK_THAT(e.what(), Catch::Contains("no tensor 'lm_head.weight'"));
  }
  // Token ids outside the vocabulary.
  std::vector<int32_t> bad{1, 2, 37};
  ForwardBatch<float> b;
  b.tokens = bad.data();
  b.offsets = {0, 3};
  CHECK_THROWS_WITH(forward_hidden(w, b), Catch::Contains("token 37 at position 2 is outside the vocabulary"));
}

TEST_CASE("a shard computes only with its layout's groups: alone it is refused, naming both") {
  const ModelConfig c = load_model_config(std::string(MLPT_SOURCE_DIR) + "/configs/models/tiny.json");
  const Weights<float> shard = shard_weights(init_weights<float>(c, 1), ModelShard{2, 1, 1, 0});
  CHECK(shard.config.num_heads == c.num_heads / 2);
  CHECK(shard.config.num_experts == c.num_experts);  // the router still sees every expert
  std::vector<int32_t> tokens{1, 2, 3};
  ForwardBatch<float> b;
  b.tokens = tokens.data();
  b.offsets = {0, 3};
  CHECK_THROWS_WITH(forward_hidden(shard, b), Catch::Contains("the weights are the shard of tp rank 1 of 2, ep rank 0 of 1") &&
                                                  Catch::Contains("the batch's groups make this tp rank 0 of 1, ep rank 0 of 1"));
  // One rank is the layout 1 x 1: the same code, nothing to talk to.
  const Weights<float> whole = shard_weights(init_weights<float>(c, 1), ModelShard{});
  CHECK(forward_hidden(whole, b) == forward_hidden(init_weights<float>(c, 1), b));
}
