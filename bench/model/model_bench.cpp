// bench_model [--threads N] [--configs tiny,small-100m] [--train-tokens N] [--decode-steps N]
//             [--prefix-configs tiny] [--prefix-tokens N]
// Throughput of the CPU reference model, as ratios against baselines measured in the same run:
// an OpenBLAS sgemm of 1024x1024x1024 with the same threads (what BLAS reaches here, not the
// hardware's peak) and the memory read bandwidth (a sum over 512 MiB). Per config:
//   train: tokens/s of forward + backward (+ head and loss gradient) over packed 512-token
//     sequences; FLOPs two ways, both against the sgemm: as executed (the body's forward, its
//     recomputation and a backward of twice the forward: 4 forward passes; the routed experts one
//     more, as their backward recomputes them; the output head 3: forward, d(input), d(weight);
//     attention and GDN by their kernels' products) and MFU on the usual basis, 6 x active params
//     per token (embedding excluded, head included) + attention and GDN mixing (3x forward);
//   decode: tokens/s of batched decode steps (prefill excluded) at batch 1 and 8, and at batch 1
//     the bytes a step must read (active weights, KV cache, GDN state) per second as a fraction of
//     the measured bandwidth;
//   shared prefix (--prefix-configs): a group of 4 sharing a --prefix-tokens prompt with 64-token
//     responses, forward + backward unshared and with the prompt computed once (ForwardBatch::
//     parents): tokens computed and the time ratio.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
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

// Parameters touched per token, by kind (the embedding is a lookup, not a product).
struct ActiveParams {
  double dense = 0;    // attention, GDN projections, norms, routers, shared experts
  double experts = 0;  // the routed experts a token uses
  double head = 0;     // the output head
  double total() const { return dense + experts + head; }
};
ActiveParams active_params(const ModelConfig& c) {
  ActiveParams p;
  const double all = static_cast<double>(parameter_count(c)), embed = static_cast<double>(c.vocab_size * c.hidden_size);
  const double experts = 3.0 * c.num_experts * c.moe_intermediate * c.hidden_size * c.num_layers;
  p.experts = 3.0 * c.experts_per_token * c.moe_intermediate * c.hidden_size * c.num_layers;
  p.head = embed;  // untied: the same shape as the embedding
  p.dense = all - experts - 2 * embed;
  return p;
}

// Forward FLOPs per token of the sequence mixing: causal attention over an average context (QKᵀ and
// PV), and the GDN recurrence (w = Sᵀk, the state update, o = Sᵀq: 3 products of dk x dv).
struct MixingFlops {
  double attention = 0, gdn = 0;
};
MixingFlops mixing_flops(const ModelConfig& c, double context) {
  MixingFlops m;
  m.attention = static_cast<double>(c.num_attention_layers()) * 2 * 2.0 * c.num_heads * c.head_dim * context;
  m.gdn = static_cast<double>(c.num_layers - c.num_attention_layers()) * c.gdn_value_heads * 6.0 * c.gdn_key_dim *
          c.gdn_value_dim;
  return m;
}

// The largest cache's size in bytes (0 when the system does not say).
double last_level_cache_bytes() {
  double best = 0;
  for (int index = 0; index < 8; ++index) {
    FILE* f = std::fopen(("/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(index) + "/size").c_str(), "r");
    if (!f) continue;
    char unit = 0;
    double size = 0;
    if (std::fscanf(f, "%lf%c", &size, &unit) >= 1)
      best = std::max(best, size * (unit == 'K' ? 1024.0 : unit == 'M' ? 1048576.0 : unit == 'G' ? 1073741824.0 : 1.0));
    std::fclose(f);
  }
  return best;
}

// Memory read bandwidth: a sum over 512 MiB by `threads` threads (integer adds vectorise without
// reassociating floats), best of 3.
double read_bandwidth_gbs(int threads) {
  const size_t n = (size_t(512) << 20) / sizeof(uint32_t);
  std::vector<uint32_t> buf(n, 1u);
  std::vector<uint64_t> sums(static_cast<size_t>(threads));
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    auto t0 = Clock::now();
    std::vector<std::thread> pool;
    for (int t = 0; t < threads; ++t)
      pool.emplace_back([&, t] {
        const size_t lo = n * t / threads, hi = n * (t + 1) / threads;
        uint32_t acc[16] = {};
        for (size_t i = lo; i + 16 <= hi; i += 16)
          for (int j = 0; j < 16; ++j) acc[j] += buf[i + j];
        uint64_t s = 0;
        for (uint32_t a : acc) s += a;
        sums[t] = s;
      });
    for (auto& th : pool) th.join();
    best = std::max(best, n * sizeof(uint32_t) / seconds_since(t0) / 1e9);
  }
  uint64_t total = 0;
  for (uint64_t s : sums) total += s;
  if (total == 0) std::printf("(bandwidth check sum is 0)\n");  // keeps the loop from being dropped
  return best;
}

// Forward + backward of a packed batch: seconds. With `head`, the output head and a stand-in for
// the log-softmax gradient run on every row in blocks of 64; without it d(hidden) is made up.
double train_pass(const Weights<float>& w, ForwardBatch<float>& b, bool head) {
  const ModelConfig& c = w.config;
  const int64_t N = b.num_tokens(), H = c.hidden_size, V = c.vocab_size;
  Weights<float> grads = zeros_like_layout<float>(c);
  auto t0 = Clock::now();
  std::vector<float> layer_inputs;
  std::vector<int16_t> experts(static_cast<size_t>(N * c.num_layers * c.experts_per_token));
  b.layer_inputs = &layer_inputs;
  b.routed_experts = experts.data();
  std::vector<float> hidden = forward_hidden(w, b);
  b.layer_inputs = nullptr;
  b.routed_experts = nullptr;
  std::vector<float> d_hidden(hidden.size(), 0.0f);
  if (head) {
    std::vector<float> logits(64 * V);
    for (int64_t r0 = 0; r0 < N; r0 += 64) {
      int64_t rows = std::min<int64_t>(64, N - r0);
      lm_head_forward(w, rows, hidden.data() + r0 * H, logits.data());
      for (auto& x : logits) x *= 1e-3f;  // stands in for (onehot - softmax) · coefficient
      cpu::linear_backward_input(rows, V, H, logits.data(), w[w.layout.lm_head], d_hidden.data() + r0 * H, false);
      cpu::linear_backward_weight(rows, V, H, logits.data(), hidden.data() + r0 * H, grads[w.layout.lm_head]);
    }
  } else {
    for (size_t i = 0; i < d_hidden.size(); ++i) d_hidden[i] = 1e-3f * static_cast<float>((i * 37) % 11) - 5e-3f;
  }
  backward(w, b, layer_inputs, experts.data(), d_hidden.data(), grads, BackwardOptions{false});
  return seconds_since(t0);
}

// A GRPO group: 4 members sharing a `prompt`-token prompt, responses of 64 tokens.
void bench_prefix(const std::string& name, int64_t prompt) {
  ModelConfig c = load_model_config(std::string(MLPT_SOURCE_DIR) + "/configs/models/" + name + ".json");
  Weights<float> w = init_weights<float>(c, 1);
  const int members = 4, response = 64;
  std::vector<int32_t> shared_prompt(static_cast<size_t>(prompt));
  for (size_t i = 0; i < shared_prompt.size(); ++i) shared_prompt[i] = static_cast<int32_t>((i * 7919) % 1000);
  std::vector<int32_t> whole, packed(shared_prompt);
  ForwardBatch<float> unshared, shared;
  unshared.offsets = {0};
  shared.offsets = {0, prompt};
  shared.parents = {-1};
  for (int m = 0; m < members; ++m) {
    std::vector<int32_t> r(response);
    for (int i = 0; i < response; ++i) r[i] = static_cast<int32_t>((m * 131 + i * 17) % 1000);
    whole.insert(whole.end(), shared_prompt.begin(), shared_prompt.end());
    whole.insert(whole.end(), r.begin(), r.end());
    unshared.offsets.push_back(static_cast<int64_t>(whole.size()));
    packed.insert(packed.end(), r.begin(), r.end());
    shared.offsets.push_back(static_cast<int64_t>(packed.size()));
    shared.parents.push_back(0);
  }
  unshared.tokens = whole.data();
  shared.tokens = packed.data();
  const double t_unshared = train_pass(w, unshared, false), t_shared = train_pass(w, shared, false);
  std::printf("%-11s shared prefix  : group of %d, %lld-token prompt + %d each: %lld tokens computed, not %lld "
              "(%.2fx fewer); forward+backward %.2f s vs %.2f s unshared (%.2fx faster)\n",
              name.c_str(), members, static_cast<long long>(prompt), response,
              static_cast<long long>(shared.num_tokens()), static_cast<long long>(unshared.num_tokens()),
              static_cast<double>(unshared.num_tokens()) / shared.num_tokens(), t_shared, t_unshared,
              t_unshared / t_shared);
}

void bench_config(const std::string& name, int64_t train_tokens, int decode_steps, double sgemm, double bandwidth) {
  ModelConfig c = load_model_config(std::string(MLPT_SOURCE_DIR) + "/configs/models/" + name + ".json");
  Weights<float> w = init_weights<float>(c, 1);
  const int64_t V = c.vocab_size;
  const ActiveParams ap = active_params(c);
  const double flops_token = 2.0 * ap.total();  // forward, per token

  // Training: sequences of 512 tokens packed into one batch; head + log-softmax gradient in blocks.
  std::vector<int32_t> tokens(static_cast<size_t>(train_tokens));
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>((i * 7919) % 1000);
  ForwardBatch<float> b;
  b.tokens = tokens.data();
  b.offsets = {0};
  while (b.offsets.back() < train_tokens) b.offsets.push_back(std::min<int64_t>(b.offsets.back() + 512, train_tokens));
  double train_s = train_pass(w, b, true);
  double train_tps = static_cast<double>(train_tokens) / train_s;
  // Per token. Sequences of 512: the average causal context is 256.5.
  const MixingFlops mix = mixing_flops(c, (std::min<int64_t>(512, train_tokens) + 1) / 2.0);
  // As executed: dense body 4 passes (forward, recomputation, backward 2x); routed experts 5 (their
  // backward recomputes them once more); head 3 (it is not recomputed); attention 5.5 (forward 2
  // products, recomputation 2, backward 7: output and log-sum-exp again, then P, dP, dQ, dK, dV);
  // GDN recurrence about 6.5 (chunked forward ~7 dk·dv per head and token, recomputation 7,
  // adjoint 25 with its state sweeps, against 6 for the forward counted).
  const double executed = 2.0 * (4 * ap.dense + 5 * ap.experts + 3 * ap.head) + 5.5 * mix.attention + 6.5 * mix.gdn;
  const double model = 6.0 * ap.total() + 3.0 * (mix.attention + mix.gdn);  // the usual MFU basis
  double executed_gflops = train_tps * executed / 1e9, model_gflops = train_tps * model / 1e9;

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
    std::printf("%-11s decode batch %d : %9.1f tokens/s  %7.2f GFLOP/s  %5.1f%% of sgemm", name.c_str(), batch,
                decode_tps, decode_gflops, 100.0 * decode_gflops / sgemm);
    if (batch == 1) {
      // What one step must read: the active weights (fp32), every cached key and value, and each
      // GDN state (read and written).
      const double context = 64 + decode_steps / 2.0;
      const double bytes = 4.0 * (ap.total() + static_cast<double>(c.num_attention_layers()) * 2 * c.num_kv_heads *
                                                   c.head_dim * context +
                                  2.0 * (c.num_layers - c.num_attention_layers()) * c.gdn_value_heads *
                                      c.gdn_key_dim * c.gdn_value_dim);
      // A working set that fits the last-level cache is read from the cache, not memory: its rate
      // says nothing about memory bandwidth (it can exceed it), so it is not printed as a fraction of it.
      const double cache = last_level_cache_bytes(), fraction = decode_tps * bytes / 1e9 / bandwidth;
      if (cache > 0 && bytes <= cache) {
        std::printf("  %6.2f GB/s read: not a memory figure (%.1f MiB per step fits the %.0f MiB last-level cache)",
                    decode_tps * bytes / 1e9, bytes / 1048576.0, cache / 1048576.0);
      } else if (fraction > 1.0) {
        std::printf("  %6.2f GB/s read: above the measured memory bandwidth, so partly cache-resident; not a memory figure",
                    decode_tps * bytes / 1e9);
      } else {
        std::printf("  %6.2f GB/s read, %5.1f%% of bandwidth", decode_tps * bytes / 1e9, 100.0 * fraction);
      }
    }
    std::printf("\n");
  }
  std::printf("%-11s train          : %9.1f tokens/s  executed %7.2f GFLOP/s = %5.1f%% of sgemm; MFU (6N + mixing) "
              "%7.2f GFLOP/s = %5.1f%% of sgemm  (%lld tokens, %.1f M params, %.1f M active)\n",
              name.c_str(), train_tps, executed_gflops, 100.0 * executed_gflops / sgemm, model_gflops,
              100.0 * model_gflops / sgemm, static_cast<long long>(train_tokens), parameter_count(c) / 1e6,
              ap.total() / 1e6);
}

}  // namespace

int main(int argc, char** argv) {
  int threads = 1, decode_steps = 32;
  int64_t train_tokens = 2048, prefix_tokens = 2048;
  std::string configs = "tiny,small-100m", prefix_configs = "tiny";
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--threads") threads = std::atoi(argv[i + 1]);
    else if (a == "--configs") configs = argv[i + 1];
    else if (a == "--train-tokens") train_tokens = std::atoll(argv[i + 1]);
    else if (a == "--decode-steps") decode_steps = std::atoi(argv[i + 1]);
    else if (a == "--prefix-configs") prefix_configs = argv[i + 1];
    else if (a == "--prefix-tokens") prefix_tokens = std::atoll(argv[i + 1]);
    else {
      std::fprintf(stderr, "unknown option %s\n", argv[i]);
      return 2;
    }
  }
  cpu::set_cpu_threads(threads);
  double sgemm = sgemm_gflops(1024), bandwidth = read_bandwidth_gbs(threads);
  std::printf("baseline sgemm 1024x1024x1024, OpenBLAS, %d threads: %.2f GFLOP/s (what BLAS reaches here)\n", threads,
              sgemm);
  std::printf("baseline memory read, 512 MiB, %d threads: %.2f GB/s\n", threads, bandwidth);
  auto each = [](const std::string& list, const std::function<void(const std::string&)>& f) {
    size_t at = 0;
    while (at <= list.size()) {
      size_t comma = list.find(',', at);
      std::string name = list.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
      if (!name.empty()) f(name);
      if (comma == std::string::npos) break;
      at = comma + 1;
    }
  };
  each(configs, [&](const std::string& name) { bench_config(name, train_tokens, decode_steps, sgemm, bandwidth); });
  each(prefix_configs, [&](const std::string& name) { bench_prefix(name, prefix_tokens); });
  return 0;
}
