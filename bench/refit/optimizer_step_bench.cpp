// bench_refit_steps: how much of the model a training step changes in BF16, and what sending only
// that saves. The ~100M config (configs/models/small-100m.json) takes real steps: forward, a policy-
// gradient loss (advantages +-1 on random sequences), backward with the router frozen, global-norm
// clipping at 0.125 and AdamW at the benchmark's settings (lr 1e-6, betas 0.9/0.999, eps 1e-8, no
// weight decay; docs/benchmark.md §2). After each step the engine's BF16 copy is updated by a sparse
// delta (plugins/transport_sparse/sparse_delta.hpp) and checked bit for bit. The sender's side is timed as the
// sparse refit runs it: each tensor's delta found and its copy brought up to date in one pass, on
// every core (plugins/transport_sparse/parallel_tensors.hpp); so is the engine's apply. Baseline in the same run:
// a memcpy of the dense BF16 bytes (what a dense refit costs locally before any network), the median
// of 5 copies, against the median of 5 encodes of the same step (each on a fresh copy of the base).
//
//   bench_refit_steps [--config small-100m] [--steps 3] [--tokens 512]
// Prints the changed fraction per step (to feed `mlpt model refit-time --changed-fraction`).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "backends/cpu/linear.hpp"
#include "parallel_tensors.hpp"
#include "sparse_delta.hpp"
#include "model/model.hpp"
#include "trainer/adamw.hpp"

using namespace mlpt::ref;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

std::vector<std::vector<uint16_t>> to_bf16(const Weights<float>& w) {
  std::vector<std::vector<uint16_t>> out;
  for (const auto& t : w.values) {
    std::vector<uint16_t> b(t.size());
    for (size_t i = 0; i < t.size(); ++i) b[i] = float_to_bf16(t[i]);
    out.push_back(std::move(b));
  }
  return out;
}

// Gradients of sum_t A_seq * log p(x_{t+1}) / tokens into `grads` (LM head included).
void policy_gradient(const Weights<float>& w, const std::vector<int32_t>& tokens, int64_t seq, Weights<float>& grads,
                     uint64_t step) {
  const ModelConfig& c = w.config;
  const int64_t T = static_cast<int64_t>(tokens.size()), H = c.hidden_size, V = c.vocab_size;
  ForwardBatch<float> b;
  b.tokens = tokens.data();
  b.offsets.clear();
  for (int64_t s = 0; s < T; s += seq) b.offsets.push_back(s);
  b.offsets.push_back(T);
  std::vector<float> layer_inputs;
  std::vector<int16_t> experts(static_cast<size_t>(T * c.num_layers * c.experts_per_token));
  b.layer_inputs = &layer_inputs;
  b.routed_experts = experts.data();
  std::vector<float> hidden = forward_hidden(w, b);
  b.layer_inputs = nullptr;
  b.routed_experts = nullptr;
  std::vector<float> d_hidden(hidden.size(), 0.0f), logits(64 * V);
  for (int64_t r0 = 0; r0 < T; r0 += 64) {
    const int64_t rows = std::min<int64_t>(64, T - r0);
    lm_head_forward(w, rows, hidden.data() + r0 * H, logits.data());
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t t = r0 + r;
      float* l = logits.data() + r * V;
      const bool last = (t + 1) % seq == 0 || t + 1 == T;
      const float adv = ((t / seq + step) % 2 ? 1.0f : -1.0f) / static_cast<float>(T);
      if (last) {
        std::fill(l, l + V, 0.0f);
        continue;
      }
      const float mx = *std::max_element(l, l + V);
      double z = 0;
      for (int64_t v = 0; v < V; ++v) z += std::exp(static_cast<double>(l[v] - mx));
      for (int64_t v = 0; v < V; ++v) l[v] = static_cast<float>(std::exp(static_cast<double>(l[v] - mx)) / z);
      l[tokens[t + 1]] -= 1.0f;  // d(-log p)/d logits = softmax - onehot
      for (int64_t v = 0; v < V; ++v) l[v] *= -adv;  // loss = -A log p
    }
    cpu::linear_backward_input(rows, V, H, logits.data(), w[w.layout.lm_head], d_hidden.data() + r0 * H, false);
    cpu::linear_backward_weight(rows, V, H, logits.data(), hidden.data() + r0 * H, grads[w.layout.lm_head]);
  }
  backward(w, b, layer_inputs, experts.data(), d_hidden.data(), grads, BackwardOptions{false});
}

}  // namespace

int main(int argc, char** argv) {
  std::string config = "small-100m";
  int steps = 3;
  int64_t T = 512;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i];
    if (k == "--config") config = argv[i + 1];
    else if (k == "--steps") steps = std::atoi(argv[i + 1]);
    else if (k == "--tokens") T = std::atoll(argv[i + 1]);
    else {
      std::fprintf(stderr, "usage: bench_refit_steps [--config NAME] [--steps N] [--tokens N]\n");
      return 2;
    }
  }
  ModelConfig c = load_model_config(std::string(MLPT_SOURCE_DIR) + "/configs/models/" + config + ".json");
  Weights<float> w = init_weights<float>(c, 1);
  Weights<float> m = zeros_like_layout<float>(c), v = zeros_like_layout<float>(c), g = zeros_like_layout<float>(c);
  std::vector<bool> trainable(w.layout.tensors.size(), true);
  // The router is frozen (docs/benchmark.md §2.3).
  for (const auto& l : w.layout.layers) trainable[l.moe.router] = false;
  AdamWSettings opt;  // lr 1e-6, betas 0.9/0.999, eps 1e-8, weight decay 0, clip 0.125
  std::vector<std::vector<uint16_t>> engine = to_bf16(w);
  int64_t numel = 0;
  for (const auto& t : engine) numel += static_cast<int64_t>(t.size());
  std::printf("bench_refit_steps: %s, %lld parameters, %lld tokens per step, AdamW lr %g clip %g, router frozen; encode and apply on %zu "
              "thread(s)\n",
              config.c_str(), static_cast<long long>(numel), static_cast<long long>(T), opt.lr, opt.grad_clip,
              mlpt::sparse_refit::tensor_threads(engine.size()));
  uint64_t x = 7;
  for (int step = 1; step <= steps; ++step) {
    std::vector<int32_t> tokens(static_cast<size_t>(T));
    for (auto& t : tokens) {
      x ^= x << 13, x ^= x >> 7, x ^= x << 17;
      t = static_cast<int32_t>(x % static_cast<uint64_t>(std::min<int64_t>(c.vocab_size, 100000)));
    }
    for (auto& t : g.values) std::fill(t.begin(), t.end(), 0.0f);
    auto t0 = Clock::now();
    policy_gradient(w, tokens, 128, g, static_cast<uint64_t>(step));
    double squares = 0;  // the clip norm over the trainable tensors
    for (size_t t = 0; t < g.values.size(); ++t)
      for (float x : g.values[t]) squares += trainable[t] ? static_cast<double>(x) * x : 0.0;
    const double norm = std::sqrt(squares);
    const double scale = norm > opt.grad_clip ? opt.grad_clip / (norm + 1e-6) : 1.0;
    adamw_update(w, g, m, v, step, opt, scale, trainable);
    const double step_s = seconds_since(t0);

    std::vector<std::vector<uint16_t>> next = to_bf16(w);
    int64_t changed = 0, changed_trainable = 0, numel_trainable = 0;
    size_t sparse_bytes = 0, dense_bytes = 0;
    int forms[3] = {0, 0, 0};
    std::vector<std::vector<std::byte>> blobs(next.size());
    std::vector<mlpt::sparse_refit::DeltaStats> stats(next.size());
    // The sender's copy of the previous version, refreshed before each timed encode (which updates it).
    std::vector<double> encodes;
    for (int rep = 0; rep < 5; ++rep) {
      std::vector<std::vector<uint16_t>> base = engine;
      auto te = Clock::now();
      mlpt::sparse_refit::for_each_tensor(next.size(), [&](size_t i) {
        blobs[i].clear();
        stats[i] = mlpt::sparse_refit::encode_delta_and_update(base[i].data(), next[i].data(), static_cast<int64_t>(next[i].size()), 2, blobs[i]);
      });
      encodes.push_back(seconds_since(te));
      if (base != next) return std::fprintf(stderr, "the sender's copy did not follow the step\n"), 1;
    }
    for (size_t i = 0; i < next.size(); ++i) {
      const auto& s = stats[i];
      changed += s.changed;
      if (trainable[i]) changed_trainable += s.changed, numel_trainable += s.numel;
      sparse_bytes += s.bytes;
      dense_bytes += 2 * next[i].size();
      ++forms[static_cast<int>(s.form)];
    }
    std::sort(encodes.begin(), encodes.end());
    const double encode_s = encodes[2];
    auto ta = Clock::now();
    mlpt::sparse_refit::for_each_tensor(next.size(), [&](size_t i) {
      mlpt::sparse_refit::apply_bf16_delta(blobs[i].data(), blobs[i].size(), engine[i].data(), static_cast<int64_t>(engine[i].size()),
                                    w.layout.tensors[i].name);
    });
    const double apply_s = seconds_since(ta);
    bool exact = engine == next;
    // Baseline: copying the dense BF16 bytes once (a dense refit moves at least this much).
    std::vector<uint16_t> flat(static_cast<size_t>(numel)), copy(static_cast<size_t>(numel), 1);
    size_t off = 0;
    for (const auto& t : next) std::memcpy(flat.data() + off, t.data(), 2 * t.size()), off += t.size();
    std::vector<double> copies;
    for (int rep = 0; rep < 5; ++rep) {
      auto tc = Clock::now();
      std::memcpy(copy.data(), flat.data(), 2 * flat.size());
      copies.push_back(seconds_since(tc));
    }
    std::sort(copies.begin(), copies.end());
    const double copy_s = copies[2];
    std::printf("step %d (%.1f s; grad norm %.3g): changed %.4f%% of BF16 elements (%.4f%% of trainable); "
                "sparse %.2f MiB vs dense %.2f MiB = %.4f (%d indices, %d bitmap, %d dense tensors); "
                "encode %.4f s (median of 5, %.4f-%.4f) + apply %.4f s vs dense memcpy %.4f s (median of 5, %.4f-%.4f): "
                "encode / memcpy %.2f; engine copy %s\n",
                step, step_s, norm, 100.0 * static_cast<double>(changed) / static_cast<double>(numel),
                100.0 * static_cast<double>(changed_trainable) / static_cast<double>(numel_trainable), sparse_bytes / 1048576.0,
                dense_bytes / 1048576.0, static_cast<double>(sparse_bytes) / static_cast<double>(dense_bytes), forms[1], forms[2],
                forms[0], encode_s, encodes.front(), encodes.back(), apply_s, copy_s, copies.front(), copies.back(), encode_s / copy_s,
                exact ? "bit-exact" : "DIFFERS");
    if (!exact) return 1;
    std::fflush(stdout);
  }
  return 0;
}
