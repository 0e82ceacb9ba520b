// bench_model [--threads N] [--configs tiny,small-100m] [--train-tokens N] [--decode-steps N]
// Throughput of the CPU reference model, as ratios against a baseline measured in the same run:
//   sgemm 2048^3 GFLOP/s (the machine's BLAS peak here), then per config
//   train: tokens/s of forward + backward (+ head and loss gradient) over a packed batch,
//   decode: tokens/s of batched decode steps (prefill excluded) at batch 1 and 8,
// and model GFLOP/s (2·active params per token forward, 3x for training) / sgemm GFLOP/s.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "backends/cpu/linear.hpp"
#include "backends/cpu/threads.hpp"
#include "model/model.hpp"
#include "model/weights.hpp"

using namespace mlpt::ref;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

double sgemm_gflops(int n) {
  std::vector<float> a(size_t(n) * n, 0.5f), b(size_t(n) * n, 0.25f), c(size_t(n) * n);
  cpu::linear_forward<float>(n, n, n, a.data(), b.data(), c.data());  // warm up
  int reps = 0;
  auto t0 = Clock::now();
  while (seconds_since(t0) < 1.0 || reps < 2) {
    cpu::linear_forward<float>(n, n, n, a.data(), b.data(), c.data());
    ++reps;
  }
  return 2.0 * n * n * double(n) * reps / seconds_since(t0) / 1e9;
}

// Parameters touched per token: everything but the unrouted experts and the embedding table.
double active_params(const ModelConfig& c) {
  double all = static_cast<double>(parameter_count(c));
  double experts = 3.0 * c.num_experts * c.moe_intermediate * c.hidden_size * c.num_layers;
  double active_experts = 3.0 * c.experts_per_token * c.moe_intermediate * c.hidden_size * c.num_layers;
  return all - experts + active_experts - static_cast<double>(c.vocab_size * c.hidden_size);
}

void bench_config(const std::string& name, int64_t train_tokens, int decode_steps, double peak) {
  ModelConfig c = load_model_config(std::string(MLPT_SOURCE_DIR) + "/configs/models/" + name + ".json");
  Weights<float> w = init_weights<float>(c, 1);
  const int64_t H = c.hidden_size, V = c.vocab_size, L = c.num_layers, k = c.experts_per_token;
  const double flops_token = 2.0 * active_params(c);

  // Training: sequences of 512 tokens packed into one batch; head + log-softmax gradient in blocks.
  std::vector<int32_t> tokens(static_cast<size_t>(train_tokens));
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>((i * 7919) % 1000);
  ForwardBatch<float> b;
  b.tokens = tokens.data();
  b.offsets = {0};
  while (b.offsets.back() < train_tokens) b.offsets.push_back(std::min<int64_t>(b.offsets.back() + 512, train_tokens));
  Weights<float> grads = zeros_like_layout<float>(c);
  auto t0 = Clock::now();
  std::vector<float> layer_inputs;
  std::vector<int16_t> experts(static_cast<size_t>(train_tokens * L * k));
  b.layer_inputs = &layer_inputs;
  b.routed_experts = experts.data();
  std::vector<float> hidden = forward_hidden(w, b);
  b.layer_inputs = nullptr;
  b.routed_experts = nullptr;
  std::vector<float> d_hidden(hidden.size(), 0.0f), logits(64 * V);
  for (int64_t r0 = 0; r0 < train_tokens; r0 += 64) {
    int64_t rows = std::min<int64_t>(64, train_tokens - r0);
    lm_head_forward(w, rows, hidden.data() + r0 * H, logits.data());
    for (auto& x : logits) x *= 1e-3f;  // stands in for (onehot - softmax) · coefficient
    cpu::linear_backward_input(rows, V, H, logits.data(), w[w.layout.lm_head], d_hidden.data() + r0 * H, false);
    cpu::linear_backward_weight(rows, V, H, logits.data(), hidden.data() + r0 * H, grads[w.layout.lm_head]);
  }
  backward(w, b, layer_inputs, experts.data(), d_hidden.data(), grads, BackwardOptions{false});
  double train_s = seconds_since(t0);
  double train_tps = static_cast<double>(train_tokens) / train_s;
  // forward + recomputed forward + backward (2x) = 4 forward-equivalents per token.
  double train_gflops = train_tps * 4.0 * flops_token / 1e9;

  for (int batch : {1, 8}) {
    std::vector<SequenceCache<float>> caches(static_cast<size_t>(batch), SequenceCache<float>(c));
    std::vector<int32_t> prompt(64, 5);
    for (auto& cache : caches) {
      ForwardBatch<float> p;
      p.tokens = prompt.data();
      p.offsets = {0, 64};
      p.caches = {&cache};
      forward_hidden(w, p);
    }
    std::vector<int32_t> step_tokens(static_cast<size_t>(batch), 7);
    std::vector<float> step_logits(static_cast<size_t>(batch) * V);
    auto t1 = Clock::now();
    for (int s = 0; s < decode_steps; ++s) {
      ForwardBatch<float> d;
      d.tokens = step_tokens.data();
      d.offsets = {0};
      for (int i = 0; i < batch; ++i) {
        d.offsets.push_back(i + 1);
        d.caches.push_back(&caches[i]);
      }
      std::vector<float> h = forward_hidden(w, d);
      lm_head_forward(w, batch, h.data(), step_logits.data());
    }
    double decode_tps = static_cast<double>(batch) * decode_steps / seconds_since(t1);
    double decode_gflops = decode_tps * flops_token / 1e9;
    std::printf("%-11s decode batch %d : %9.1f tokens/s  %7.2f GFLOP/s  %5.1f%% of sgemm\n", name.c_str(), batch,
                decode_tps, decode_gflops, 100.0 * decode_gflops / peak);
  }
  std::printf("%-11s train          : %9.1f tokens/s  %7.2f GFLOP/s  %5.1f%% of sgemm  (%lld tokens, %.1f M params, %.1f M active)\n",
              name.c_str(), train_tps, train_gflops, 100.0 * train_gflops / peak, static_cast<long long>(train_tokens),
              parameter_count(c) / 1e6, active_params(c) / 1e6);
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 1, decode_steps = 32;
  int64_t train_tokens = 2048;
  std::string configs = "tiny,small-100m";
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--threads") threads = std::atoi(argv[i + 1]);
    else if (a == "--configs") configs = argv[i + 1];
    else if (a == "--train-tokens") train_tokens = std::atoll(argv[i + 1]);
    else if (a == "--decode-steps") decode_steps = std::atoi(argv[i + 1]);
    else {
      std::fprintf(stderr, "unknown option %s\n", argv[i]);
      return 2;
    }
  }
  cpu::set_cpu_threads(threads);
  double peak = sgemm_gflops(1024);
  std::printf("baseline sgemm 1024^3: %.2f GFLOP/s (%d BLAS threads)\n", peak, threads);
  size_t at = 0;
  while (at <= configs.size()) {
    size_t comma = configs.find(',', at);
    std::string name = configs.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
    if (!name.empty()) bench_config(name, train_tokens, decode_steps, peak);
    if (comma == std::string::npos) break;
    at = comma + 1;
  }
  return 0;
}
