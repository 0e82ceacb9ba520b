// bench_reference_cuda [--train-seqs N] [--train-len N] [--decode-batch N] [--decode-steps N]
// Throughput of the CUDA reference model on a ~1B-parameter config, as ratios against baselines
// measured in the same run on the same GPU:
//   peak: cuBLAS BF16 GEMM (8192^3, fp32 accumulation) TFLOP/s;
//   bandwidth: device-to-device copy GB/s (read + write);
//   train: tokens/s of forward + LM head + logprob gradient + backward over packed sequences, and
//          MFU = 6 · active params · tokens/s / peak;
//   decode: tokens/s of one-token steps of the engine's device step (generate_step: device state,
//          paged KV, LM head, sampling; prefill excluded) at batch 1 and --decode-batch, and the
//          fraction of bandwidth = (weights touched + GDN state read/write + KV read) per step.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "device_model/generate.hpp"
#include "backends/cuda/head.hpp"
#include "backends/cuda/linear.hpp"
#include "backends/cuda/cuda_ops.hpp"
#include "device_model/model.hpp"
#include "model/config.hpp"
#include "model/weights.hpp"

using namespace mlpt::ref::cuda;
using mlpt::ref::Buffer;
using mlpt::ref::ModelConfig;
using mlpt::ref::Weights;
using mlpt::ref::init_weights;
using mlpt::ref::parameter_count;
using mlpt::ref::parse_model_config;
namespace dev = mlpt::ref::dev;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

ModelConfig bench_config() {
  nlohmann::json text = {
      {"model_type", "qwen3_5_moe_text"}, {"vocab_size", 32768}, {"hidden_size", 2048}, {"num_hidden_layers", 12},
      {"num_attention_heads", 16}, {"num_key_value_heads", 2}, {"head_dim", 128}, {"linear_num_key_heads", 8},
      {"linear_num_value_heads", 16}, {"linear_key_head_dim", 128}, {"linear_value_head_dim", 128},
      {"linear_conv_kernel_dim", 4}, {"num_experts", 16}, {"num_experts_per_tok", 2}, {"moe_intermediate_size", 512},
      {"shared_expert_intermediate_size", 512}, {"norm_topk_prob", true}, {"rms_norm_eps", 1e-6},
      {"max_position_embeddings", 65536},
      {"rope_parameters", {{"rope_type", "default"}, {"rope_theta", 1e7}, {"partial_rotary_factor", 0.25}}},
      {"initializer_range", 0.02}, {"dtype", "bfloat16"}};
  return parse_model_config({{"model_type", "qwen3_5_moe"}, {"text_config", text}}, "bench_config");
}

// Parameters a token touches: all but the unrouted experts and the embedding table.
double active_params(const ModelConfig& c) {
  const double experts = 3.0 * c.num_experts * c.moe_intermediate * c.hidden_size * c.num_layers;
  const double active = experts * c.experts_per_token / c.num_experts;
  return double(parameter_count(c)) - experts + active - double(c.vocab_size * c.hidden_size);
}

float elapsed_ms(cudaEvent_t a, cudaEvent_t b) {
  float ms = 0;
  check(cudaEventElapsedTime(&ms, a, b), "cudaEventElapsedTime");
  return ms;
}

double gemm_tflops(const Context& ctx) {
  const int64_t n = 8192;
  DeviceBuffer a(size_t(n * n) * 2), b(size_t(n * n) * 2), c(size_t(n * n) * 2);
  check(cudaMemset(a.get(), 0, a.bytes()), "memset"), check(cudaMemset(b.get(), 0, b.bytes()), "memset");
  check(cudaDeviceSynchronize(), "sync");
  cudaEvent_t e0, e1;
  check(cudaEventCreate(&e0), "event"), check(cudaEventCreate(&e1), "event");
  linear_forward(ctx, n, n, n, a.as<bf16>(), b.as<bf16>(), c.as<bf16>());  // warm up
  const int reps = 20;
  check(cudaEventRecord(e0, ctx.stream), "record");
  for (int i = 0; i < reps; ++i) linear_forward(ctx, n, n, n, a.as<bf16>(), b.as<bf16>(), c.as<bf16>());
  check(cudaEventRecord(e1, ctx.stream), "record");
  check(cudaEventSynchronize(e1), "sync");
  return 2.0 * double(n) * n * n * reps / (elapsed_ms(e0, e1) / 1e3) / 1e12;
}

double copy_gbps(const Context& ctx) {
  const size_t bytes = size_t(2) << 30;
  DeviceBuffer a(bytes), b(bytes);
  cudaEvent_t e0, e1;
  check(cudaEventCreate(&e0), "event"), check(cudaEventCreate(&e1), "event");
  check(cudaMemcpyAsync(b.get(), a.get(), bytes, cudaMemcpyDeviceToDevice, ctx.stream), "copy");
  const int reps = 10;
  check(cudaEventRecord(e0, ctx.stream), "record");
  for (int i = 0; i < reps; ++i)
    check(cudaMemcpyAsync(b.get(), a.get(), bytes, cudaMemcpyDeviceToDevice, ctx.stream), "copy");
  check(cudaEventRecord(e1, ctx.stream), "record");
  check(cudaEventSynchronize(e1), "sync");
  return 2.0 * double(bytes) * reps / (elapsed_ms(e0, e1) / 1e3) / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t train_seqs = 4, train_len = 1024, decode_batch = 32, decode_steps = 32, prefill = 128;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    const int64_t v = std::stoll(argv[i + 1]);
    if (a == "--train-seqs") train_seqs = v;
    else if (a == "--train-len") train_len = v;
    else if (a == "--decode-batch") decode_batch = v;
    else if (a == "--decode-steps") decode_steps = v;
    else { std::fprintf(stderr, "bench_reference_cuda: unknown option %s\n", a.c_str()); return 2; }
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::fprintf(stderr, "bench_reference_cuda: FAILED: no CUDA device\n");
    return 1;
  }
  try {
    Context ctx = create_context();
    CudaOps ops(ctx);
    const double peak = gemm_tflops(ctx), bw = copy_gbps(ctx);
    std::printf("peak: cuBLAS BF16 GEMM 8192^3 %.1f TFLOP/s\n", peak);
    std::printf("bandwidth: device copy %.0f GB/s\n", bw);

    const ModelConfig cfg = bench_config();
    const auto t_init = Clock::now();
    Weights<float> host = init_weights<float>(cfg, 1);
    dev::DeviceWeights w = dev::upload_weights(ops, host);
    host = Weights<float>{};
    std::printf("config: %.2fB parameters, %.2fB active per token (init+upload %.1f s)\n",
                double(parameter_count(cfg)) / 1e9, active_params(cfg) / 1e9, seconds_since(t_init));
    auto ws = dev::make_workspace();
    const int64_t V = cfg.vocab_size, H = cfg.hidden_size;

    // Training step: forward, head, logprob gradient, backward (gradients fp32, not applied).
    {
      dev::DeviceBatch b;
      const int64_t N = train_seqs * train_len;
      b.tokens.resize(size_t(N));
      for (int64_t i = 0; i < N; ++i) b.tokens[i] = int32_t((i * 7919) % V);
      for (int64_t s = 1; s <= train_seqs; ++s) b.offsets.push_back(s * train_len);
      std::vector<int16_t> experts(size_t(N * cfg.num_layers * cfg.experts_per_token));
      std::vector<Buffer> grads;
      for (const auto& t : w.layout.tensors) grads.emplace_back(ops, size_t(t.numel()) * 4);
      Buffer hidden, inputs;
      DeviceBuffer logits(size_t(N * V) * 4), lse(size_t(N) * 4), lp(size_t(N) * 4),
          coef(size_t(N) * 4), targets(size_t(N) * 4), dl(size_t(N * V) * 2), dh(size_t(N * H) * 2);
      check(cudaMemset(targets.get(), 0, targets.bytes()), "memset");
      std::vector<float> c(size_t(N), -1.f / float(N));
      check(cudaMemcpy(coef.get(), c.data(), c.size() * 4, cudaMemcpyHostToDevice), "copy");
      auto train_step = [&] {
        b.routed_experts = experts.data();
        dev::forward_hidden(ops, w, b, *ws, hidden, &inputs);
        const bf16* hb = as_cuda(hidden.as<mlpt::ref::bf16>());
        logits_forward(ctx, N, V, H, hb, as_cuda(w.bf(w.layout.lm_head)), logits.as<float>());
        token_logprobs(ctx, N, V, V, logits.as<float>(), targets.as<int32_t>(), lp.as<float>(), lse.as<float>());
        token_logprobs_backward(ctx, N, V, V, logits.as<float>(), lse.as<float>(), targets.as<int32_t>(),
                                coef.as<float>(), dl.as<bf16>());
        linear_backward_input(ctx, N, V, H, dl.as<bf16>(), as_cuda(w.bf(w.layout.lm_head)), dh.as<bf16>(), false);
        linear_backward_weight(ctx, N, V, H, dl.as<bf16>(), hb, grads[w.layout.lm_head].as<float>());
        b.routed_experts = nullptr;
        dev::backward(ops, w, b, inputs, experts.data(), as_ref(dh.as<bf16>()), grads, true, *ws);
      };
      train_step();  // warm up (allocations)
      const int reps = 3;
      const auto t0 = Clock::now();
      for (int i = 0; i < reps; ++i) train_step();
      const double tps = double(N) * reps / seconds_since(t0);
      const double mfu = 6.0 * active_params(cfg) * tps / (peak * 1e12);
      std::printf("train: %.0f tokens/s (%lld x %lld tokens), MFU %.3f of the measured GEMM peak\n", tps,
                  (long long)train_seqs, (long long)train_len, mfu);
    }

    // Decode: one-token steps of the engine's device step (generate_step: forward over per-sequence
    // state and the paged KV cache, LM head, sampling), at batch 1 and at --decode-batch.
    for (const int64_t batch : {int64_t(1), decode_batch}) {
      const int64_t bs = 64;
      dev::KvBlockPool pool(ops, cfg, batch * ((prefill + decode_steps + 1 + bs - 1) / bs), bs);
      std::vector<std::unique_ptr<dev::DeviceSequenceState>> states;
      dev::DeviceBatch pre;
      pre.kv = &pool.cache();
      for (int64_t s = 0; s < batch; ++s) {
        states.push_back(std::make_unique<dev::DeviceSequenceState>(ops, cfg));
        pool.reserve(states.back()->blocks, prefill + decode_steps + 1);
        for (int64_t i = 0; i < prefill; ++i) pre.tokens.push_back(int32_t((s * 131 + i * 17) % V));
        pre.offsets.push_back(pre.offsets.back() + prefill);
        pre.states.push_back(states[s].get());
      }
      dev::StepScratch scratch;
      dev::generate_step(ops, w, pre, dev::SampleRows{}, V, *ws, scratch);
      dev::DeviceBatch step;
      step.kv = &pool.cache();
      step.chunked = false;
      dev::SampleRows rows;
      for (int64_t s = 0; s < batch; ++s) {
        step.tokens.push_back(int32_t(s % V));
        step.offsets.push_back(s + 1);
        step.states.push_back(states[s].get());
        rows.segment.push_back(size_t(s));
        rows.params.push_back(SamplingRow{1.f, 1.f, 1, 0});
        rows.host_logits.push_back(false);
      }
      auto decode_step = [&] {
        const dev::StepResult r = dev::generate_step(ops, w, step, rows, V, *ws, scratch);
        std::copy(r.tokens.begin(), r.tokens.end(), step.tokens.begin());  // feed what was drawn
      };
      decode_step();  // warm up
      const auto t0 = Clock::now();
      for (int64_t i = 1; i < decode_steps; ++i) decode_step();
      const double secs = seconds_since(t0), steps = double(decode_steps - 1);
      const double tps = double(batch) * steps / secs;
      // Bytes one step must move: the weights it touches (bf16: all but the embedding table and
      // the experts no token of the batch routes to, expected E·(1 − (1 − k/E)^batch) per layer),
      // each sequence's GDN state read + written, and its KV read.
      const double experts = 3.0 * cfg.num_experts * cfg.moe_intermediate * cfg.hidden_size * cfg.num_layers;
      const double hit = 1.0 - std::pow(1.0 - double(cfg.experts_per_token) / cfg.num_experts, double(batch));
      const double weights = double(parameter_count(cfg)) - experts - double(cfg.vocab_size * cfg.hidden_size) +
                             experts * hit;
      const double gdn_layers = double(cfg.num_layers - cfg.num_attention_layers());
      const double state_bytes = gdn_layers * cfg.gdn_value_heads * cfg.gdn_key_dim * cfg.gdn_value_dim * 4.0 * 2;
      const double kv_bytes = double(cfg.num_attention_layers()) * 2 * cfg.num_kv_heads * cfg.head_dim * 2.0 *
                              double(prefill + decode_steps / 2);
      const double bytes = weights * 2 + double(batch) * (state_bytes + kv_bytes);
      std::printf("decode: %.0f tokens/s (batch %lld, %.2f ms/step), %.3f of the measured copy bandwidth\n", tps,
                  (long long)batch, secs / steps * 1e3, bytes * steps / secs / (bw * 1e9));
    }
    destroy_context(ctx);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_reference_cuda: FAILED: %s\n", e.what());
    return 1;
  }
  return 0;
}
