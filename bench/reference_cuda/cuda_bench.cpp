// bench_reference_cuda [--train-seqs N] [--train-len N] [--decode-batch N] [--decode-steps N]
//                      [--prefill-len N] [--seq-lens N,N] [--paths GEMM/EXPERTS[/graphs][/cudnn],...]
//                      [--decode-only]
// Throughput of the CUDA reference model on a ~1B-parameter config, every row of issue 28's table
// as a ratio against a baseline measured in the same run on the same GPU, for each library path
// (--paths, default cublas/grouped,cublaslt/grouped,cublaslt/per_expert,cublaslt/grouped/cudnn:
// device_model/backend_options; /cudnn: cuda_attention = "cudnn", cuDNN's fused attention):
//   peak: cuBLAS BF16 GEMM (8192^3, fp32 accumulation) TFLOP/s (the MFU rows' baseline);
//   bandwidth: device-to-device copy GB/s (read + write; the decode rows' baseline);
//   upload: pinned host-to-device GB/s (the init + upload row's baseline: the weights' bytes at it);
//   train: forward + LM head + logprob gradient + backward over packed sequences,
//          MFU = 6 · active params · tokens/s / peak;
//   decode: one-token steps of the engine's device step (generate_step) at batch 1 and
//          --decode-batch; bytes per step = weights touched + GDN state read/write + KV read;
//          a path ending in /graphs (cuda_graphs = "decode") runs them as replayed CUDA graphs
//          (device_model/decode_graphs.hpp) and measures the decode rows only (--decode-only: the
//          decode rows alone for every path);
//   prefill: one --prefill-len prompt through generate_step, model FLOPs = 2 · active params ·
//          tokens + causal attention 2·N²·heads·D per attention layer + chunked GDN (below);
//   attention: forward + backward of one causal sequence by each attention path (cuda_attention):
//          the flash-style kernels and cuDNN's fused attention (a cuDNN that cannot be loaded prints
//          its row as not run, with the reason), FLOPs 2·N²·heads·D forward and 2.5× that backward;
//   gdn: the chunked kernels, forward + backward of one sequence, FLOPs as the chunked form executes
//          them per token and value head: 6·dk·dv (state read, update, output) + 2·C·(dk + dv)
//          (in-chunk products and the solve, chunk C = 64), backward counted as twice the forward;
//   memory: device memory per token trained and per decode sequence against the model's arithmetic.
// Rows print as they are measured ("row: ..."), so a run cut short keeps what it measured.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "backends/cuda/attention.hpp"
#include "backends/cuda/cuda_ops.hpp"
#include "backends/cuda/cudnn_attention.hpp"
#include "backends/cuda/gdn.hpp"
#include "backends/cuda/gemm.hpp"
#include "backends/cuda/head.hpp"
#include "backends/cuda/linear.hpp"
#include "device_model/backend_options.hpp"
#include "device_model/decode_graphs.hpp"
#include "device_model/generate.hpp"
#include "device_model/model.hpp"
#include "model/config.hpp"
#include "model/weights.hpp"

using namespace mlpt::ref::cuda;
using mlpt::ref::BackendOptions;
using mlpt::ref::Buffer;
using mlpt::ref::init_weights;
using mlpt::ref::ModelConfig;
using mlpt::ref::parameter_count;
using mlpt::ref::parse_model_config;
using mlpt::ref::Weights;
namespace dev = mlpt::ref::dev;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

ModelConfig bench_config() {
  nlohmann::json text = {
      {"model_type", "qwen3_5_moe_text"},
      {"vocab_size", 32768},
      {"hidden_size", 2048},
      {"num_hidden_layers", 12},
      {"num_attention_heads", 16},
      {"num_key_value_heads", 2},
      {"head_dim", 128},
      {"linear_num_key_heads", 8},
      {"linear_num_value_heads", 16},
      {"linear_key_head_dim", 128},
      {"linear_value_head_dim", 128},
      {"linear_conv_kernel_dim", 4},
      {"num_experts", 16},
      {"num_experts_per_tok", 2},
      {"moe_intermediate_size", 512},
      {"shared_expert_intermediate_size", 512},
      {"norm_topk_prob", true},
      {"rms_norm_eps", 1e-6},
      {"max_position_embeddings", 65536},
      {"rope_parameters", {{"rope_type", "default"}, {"rope_theta", 1e7}, {"partial_rotary_factor", 0.25}}},
      {"initializer_range", 0.02},
      {"dtype", "bfloat16"}};
  return parse_model_config({{"model_type", "qwen3_5_moe"}, {"text_config", text}}, "bench_config");
}

// Parameters a token touches: all but the unrouted experts and the embedding table.
double active_params(const ModelConfig& c) {
  const double experts = 3.0 * c.num_experts * c.moe_intermediate * c.hidden_size * c.num_layers;
  const double active = experts * c.experts_per_token / c.num_experts;
  return double(parameter_count(c)) - experts + active - double(c.vocab_size * c.hidden_size);
}

constexpr double kGdnChunk = 64;
// FLOPs of the chunked GDN forward for N tokens of one GDN layer (see the header).
double gdn_forward_flops(const ModelConfig& c, double N) {
  const double dk = double(c.gdn_key_dim), dv = double(c.gdn_value_dim);
  return N * double(c.gdn_value_heads) * (6 * dk * dv + 2 * kGdnChunk * (dk + dv));
}
// FLOPs of causal attention forward for one sequence of N tokens, one layer.
double attention_forward_flops(const ModelConfig& c, double N) {
  return 2.0 * N * N * double(c.num_heads) * double(c.head_dim);
}

float elapsed_ms(cudaEvent_t a, cudaEvent_t b) {
  float ms = 0;
  check(cudaEventElapsedTime(&ms, a, b), "cudaEventElapsedTime");
  return ms;
}

// Seconds `reps` calls of f take on ctx's stream, after one call to warm up.
template <class F>
double stream_seconds(const Context& ctx, int reps, F&& f) {
  f();
  cudaEvent_t e0, e1;
  check(cudaEventCreate(&e0), "event"), check(cudaEventCreate(&e1), "event");
  check(cudaEventRecord(e0, ctx.stream), "record");
  for (int i = 0; i < reps; ++i) f();
  check(cudaEventRecord(e1, ctx.stream), "record");
  check(cudaEventSynchronize(e1), "sync");
  const double s = elapsed_ms(e0, e1) / 1e3 / reps;
  cudaEventDestroy(e0), cudaEventDestroy(e1);
  return s;
}

double gemm_tflops(const Context& ctx) {
  const int64_t n = 8192;
  DeviceBuffer a(size_t(n * n) * 2), b(size_t(n * n) * 2), c(size_t(n * n) * 2);
  check(cudaMemset(a.get(), 0, a.bytes()), "memset"), check(cudaMemset(b.get(), 0, b.bytes()), "memset");
  check(cudaDeviceSynchronize(), "sync");
  const double s = stream_seconds(
      ctx, 20, [&] { linear_forward(ctx, n, n, n, a.as<bf16>(), b.as<bf16>(), c.as<bf16>()); });
  return 2.0 * double(n) * n * n / s / 1e12;
}

double copy_gbps(const Context& ctx) {
  const size_t bytes = size_t(2) << 30;
  DeviceBuffer a(bytes), b(bytes);
  const double s = stream_seconds(ctx, 10, [&] {
    check(cudaMemcpyAsync(b.get(), a.get(), bytes, cudaMemcpyDeviceToDevice, ctx.stream), "copy");
  });
  return 2.0 * double(bytes) / s / 1e9;
}

double upload_gbps(const Context& ctx) {
  const size_t bytes = size_t(1) << 30;
  DeviceBuffer d(bytes);
  void* host = nullptr;
  check(cudaMallocHost(&host, bytes), "cudaMallocHost");
  std::memset(host, 0, bytes);
  const double s = stream_seconds(ctx, 3, [&] {
    check(cudaMemcpyAsync(d.get(), host, bytes, cudaMemcpyHostToDevice, ctx.stream), "upload");
  });
  cudaFreeHost(host);
  return double(bytes) / s / 1e9;
}

size_t used_device_bytes() {
  size_t free = 0, total = 0;
  check(cudaMemGetInfo(&free, &total), "cudaMemGetInfo");
  return total - free;
}

// One row of the table: what was measured, the baseline it is a fraction of, the ratio, the goal.
void row(const std::string& measure, const std::string& path, double value, const char* unit, double baseline,
         const char* baseline_unit, double ratio, const char* goal, bool met) {
  std::printf("row: %-34s [%-19s] %10.3f %-9s baseline %9.1f %-9s ratio %.3f  goal %s: %s\n", measure.c_str(),
              path.c_str(), value, unit, baseline, baseline_unit, ratio, goal, met ? "met" : "not met");
  std::fflush(stdout);
}

std::vector<int64_t> parse_lengths(const std::string& s) {
  std::vector<int64_t> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty()) out.push_back(std::stoll(item));
  return out;
}

std::vector<BackendOptions> parse_paths(const std::string& s) {
  std::vector<BackendOptions> out;
  std::stringstream in(s);
  for (std::string item; std::getline(in, item, ',');) {
    const size_t slash = item.find('/');
    BackendOptions o;
    o.gemm = mlpt::ref::parse_gemm_library(item.substr(0, slash), "--paths");
    std::string experts = slash == std::string::npos ? "" : item.substr(slash + 1);
    // Trailing switches: /graphs (decode steps as CUDA graphs), /cudnn (cuDNN's fused attention).
    for (size_t at; (at = experts.find('/')) != std::string::npos;) {
      const size_t end = experts.find('/', at + 1);
      const std::string flag =
          experts.substr(at + 1, end == std::string::npos ? std::string::npos : end - at - 1);
      if (flag == "graphs")
        o.graphs = mlpt::ref::DecodeGraphMode::decode;
      else if (flag == "cudnn")
        o.attention = mlpt::ref::AttentionLibrary::cudnn;
      else
        throw std::invalid_argument("--paths: " + item + ": expected GEMM/EXPERTS[/graphs][/cudnn]");
      experts.erase(at, end == std::string::npos ? std::string::npos : end - at);
    }
    if (!experts.empty()) o.experts = mlpt::ref::parse_expert_gemm(experts, "--paths");
    out.push_back(o);
  }
  return out;
}

std::string path_name(const BackendOptions& o) {
  return std::string(mlpt::ref::to_string(o.gemm)) + "/" + mlpt::ref::to_string(o.experts) +
         (o.graphs == mlpt::ref::DecodeGraphMode::decode ? "/graphs" : "") +
         (o.attention == mlpt::ref::AttentionLibrary::cudnn ? "/cudnn" : "");
}

// Random values in [-scale, scale) on the device (a cheap host generator; values only need to be
// finite and of a realistic size).
template <class T>
void fill(DeviceBuffer& b, size_t n, float scale, float offset = 0.f) {
  std::vector<T> h(n);
  uint64_t s = 0x2545F4914F6CDD1Dull ^ n;
  for (auto& x : h) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    const float u = float(s >> 40) * 0x1.0p-24f;
    if constexpr (std::is_same_v<T, bf16>)
      x = __float2bfloat16(offset + scale * (2 * u - 1));
    else
      x = offset + scale * (2 * u - 1);
  }
  b.reserve(n * sizeof(T));
  check(cudaMemcpy(b.get(), h.data(), n * sizeof(T), cudaMemcpyHostToDevice), "fill");
}

// `fused` NULL: the kernels (attention.hpp); else cuDNN's fused attention on the same stream.
void bench_attention(const Context& ctx, CudnnAttention* fused, const ModelConfig& cfg, int64_t N,
                     double peak) {
  const int64_t nh = cfg.num_heads, nkv = cfg.num_kv_heads, D = cfg.head_dim;
  DeviceBuffer q, k, v, d_out, out(size_t(N * nh * D) * 2), lse(size_t(N * nh) * 4),
      dq(size_t(N * nh * D) * 2), dk(size_t(N * nkv * D) * 2), dv(size_t(N * nkv * D) * 2), offsets(16),
      scratch;
  fill<bf16>(q, size_t(N * nh * D), 1.f), fill<bf16>(k, size_t(N * nkv * D), 1.f);
  fill<bf16>(v, size_t(N * nkv * D), 1.f), fill<bf16>(d_out, size_t(N * nh * D), 1.f);
  const int64_t off[2] = {0, N};
  check(cudaMemcpy(offsets.get(), off, sizeof(off), cudaMemcpyHostToDevice), "offsets");
  const AttentionShape shape{nh, nkv, D};
  const int64_t* o = offsets.as<int64_t>();
  const int reps = N > 16384 ? 1 : 3;
  // The first call of each pass is outside the timing (stream_seconds): cuDNN builds its plan there.
  const double fwd = stream_seconds(ctx, reps, [&] {
    if (fused)
      fused->forward(shape, o, o, 1, N, q.as<bf16>(), k.as<bf16>(), v.as<bf16>(), out.as<bf16>(),
                     lse.as<float>());
    else
      attention_forward(ctx, shape, o, o, 1, N, q.as<bf16>(), k.as<bf16>(), v.as<bf16>(), out.as<bf16>(),
                        lse.as<float>());
  });
  const double bwd = stream_seconds(ctx, reps, [&] {
    if (fused)
      fused->backward(shape, o, o, 1, N, N, q.as<bf16>(), k.as<bf16>(), v.as<bf16>(), out.as<bf16>(),
                      lse.as<float>(), d_out.as<bf16>(), dq.as<bf16>(), dk.as<bf16>(), dv.as<bf16>());
    else
      attention_backward(ctx, shape, o, o, 1, N, N, q.as<bf16>(), k.as<bf16>(), v.as<bf16>(), out.as<bf16>(),
                         lse.as<float>(), d_out.as<bf16>(), dq.as<bf16>(), dk.as<bf16>(), dv.as<bf16>(),
                         scratch);
  });
  const double flops = attention_forward_flops(cfg, double(N)) * 3.5;
  const double tflops = flops / (fwd + bwd) / 1e12;
  const char* path = fused ? "cudnn fused" : "flash-style kernels";
  row("attention fwd+bwd " + std::to_string(N / 1024) + "k MFU", path, tflops, "TFLOP/s", peak, "TFLOP/s",
      tflops / peak, ">= 0.50", tflops / peak >= 0.5);
  std::printf("      attention %lldk [%s]: forward %.4f s, backward %.4f s\n", (long long)(N / 1024), path,
              fwd, bwd);
}

void bench_gdn(const Context& ctx, const ModelConfig& cfg, int64_t N, double peak) {
  const int64_t Hk = cfg.gdn_key_heads, Hv = cfg.gdn_value_heads, dk = cfg.gdn_key_dim,
                dv = cfg.gdn_value_dim;
  DeviceBuffer q, k, v, g, beta, d_out, out(size_t(N * Hv * dv) * 2), dq(size_t(N * Hk * dk) * 4),
      dkk(size_t(N * Hk * dk) * 4), dvv(size_t(N * Hv * dv) * 2), dg(size_t(N * Hv) * 4),
      db(size_t(N * Hv) * 4), offsets(16), scratch;
  // Unit-norm-sized keys and queries (the model l2-normalises them), decays in (0, 1), β in (0, 1).
  const float unit = 1.f / std::sqrt(float(dk));
  fill<float>(q, size_t(N * Hk * dk), unit), fill<float>(k, size_t(N * Hk * dk), unit);
  fill<bf16>(v, size_t(N * Hv * dv), 1.f), fill<float>(g, size_t(N * Hv), 0.05f, -0.1f);
  fill<float>(beta, size_t(N * Hv), 0.25f, 0.5f), fill<bf16>(d_out, size_t(N * Hv * dv), 1.f);
  const int64_t off[2] = {0, N};
  check(cudaMemcpy(offsets.get(), off, sizeof(off), cudaMemcpyHostToDevice), "offsets");
  const GdnShape shape{Hk, Hv, dk, dv};
  const int64_t* o = offsets.as<int64_t>();
  const int reps = N > 16384 ? 1 : 3;
  const double fwd = stream_seconds(ctx, reps, [&] {
    gdn_chunked_forward(ctx, shape, o, 1, q.as<float>(), k.as<float>(), v.as<bf16>(), g.as<float>(),
                        beta.as<float>(), nullptr, out.as<bf16>());
  });
  const double bwd = stream_seconds(ctx, reps, [&] {
    gdn_backward(ctx, shape, o, off, 1, q.as<float>(), k.as<float>(), v.as<bf16>(), g.as<float>(),
                 beta.as<float>(), d_out.as<bf16>(), dq.as<float>(), dkk.as<float>(), dvv.as<bf16>(),
                 dg.as<float>(), db.as<float>(), scratch);
  });
  const double tflops = gdn_forward_flops(cfg, double(N)) * 3 / (fwd + bwd) / 1e12;
  row("GDN chunked fwd+bwd " + std::to_string(N / 1024) + "k MFU", "chunked kernels", tflops, "TFLOP/s", peak,
      "TFLOP/s", tflops / peak, ">= 0.30", tflops / peak >= 0.3);
  std::printf("      gdn %lldk: forward %.3f s, backward %.3f s\n", (long long)(N / 1024), fwd, bwd);
}

// Bytes a token keeps while training, by the model's arithmetic: the residual stream entering every
// layer and leaving the last (kept for the backward), the LM head's fp32 logits and bf16 logit
// gradient, and one layer's recomputed activations and their gradients (the largest layer's).
double train_bytes_per_token(const ModelConfig& c) {
  const double H = double(c.hidden_size), k = double(c.experts_per_token), I = double(c.moe_intermediate);
  const double saved = double(c.num_layers + 1) * H * 2 + double(c.vocab_size) * (4 + 2) + H * 2;
  const double C = double(c.conv_dim()), kd = double(c.key_dim()), vd = double(c.value_dim());
  const double gdn = C * 2 * 2 + vd * 2 * 4 + kd * 4 * 2 + double(c.gdn_value_heads) * (2 * 2 + 4 * 2);
  const double heads = double(c.num_heads * c.head_dim), kv = double(c.num_kv_heads * c.head_dim);
  const double attn = heads * 2 * 2 * 2 + kv * 2 * 4 + heads * 2 * 3 + double(c.num_heads) * 4;
  const double moe = double(c.num_experts) * 4 + k * (2 + 4) + k * (2 * H + 3 * I) * 2 +
                     3 * double(c.shared_intermediate) * 2 + H * 2 + k * (2 * H + 3 * I) * 2;
  const double layer = H * 2 * 4 + std::max(gdn, attn) * 2 + moe;
  return saved + layer;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t train_seqs = 4, train_len = 1024, decode_batch = 32, decode_steps = 32, prefill = 128,
          prefill_len = 65536;
  std::string seq_lens = "8192,65536",
              paths = "cublas/grouped,cublaslt/grouped,cublaslt/per_expert,cublaslt/grouped/cudnn";
  bool decode_rows_only = false;  // --decode-only, the one option without a value
  std::vector<char*> args{argv[0]};
  for (int i = 1; i < argc; ++i)
    if (std::string(argv[i]) == "--decode-only")
      decode_rows_only = true;
    else
      args.push_back(argv[i]);
  argc = static_cast<int>(args.size());
  argv = args.data();
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i], v = argv[i + 1];
    if (a == "--train-seqs")
      train_seqs = std::stoll(v);
    else if (a == "--train-len")
      train_len = std::stoll(v);
    else if (a == "--decode-batch")
      decode_batch = std::stoll(v);
    else if (a == "--decode-steps")
      decode_steps = std::stoll(v);
    else if (a == "--prefill-len")
      prefill_len = std::stoll(v);
    else if (a == "--seq-lens")
      seq_lens = v;
    else if (a == "--paths")
      paths = v;
    else {
      std::fprintf(stderr, "bench_reference_cuda: unknown option %s\n", a.c_str());
      return 2;
    }
  }
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::fprintf(stderr, "bench_reference_cuda: FAILED: no CUDA device\n");
    return 1;
  }
  try {
    const std::vector<BackendOptions> options = parse_paths(paths);
    Context ctx = create_context();
    CudaOps ops(ctx);
    GemmEngine& engine = gemm_engine(ctx);
    const double peak = gemm_tflops(ctx), bw = copy_gbps(ctx), h2d = upload_gbps(ctx);
    std::printf("peak: cuBLAS BF16 GEMM 8192^3 %.1f TFLOP/s\n", peak);
    BackendOptions lt;
    lt.gemm = mlpt::ref::GemmLibrary::cublaslt;
    engine.set_options(lt);
    std::printf("peak: cuBLASLt BF16 GEMM 8192^3 %.1f TFLOP/s (not the baseline)\n", gemm_tflops(ctx));
    engine.set_options(BackendOptions{});
    std::printf("bandwidth: device copy %.0f GB/s, pinned host-to-device %.1f GB/s\n", bw, h2d);

    const ModelConfig cfg = bench_config();
    const size_t used0 = used_device_bytes();
    const auto t_init = Clock::now();
    Weights<float> host = init_weights<float>(cfg, 1);
    const double init_s = seconds_since(t_init);
    const auto t_upload = Clock::now();
    dev::DeviceWeights w = dev::upload_weights(ops, host);
    const double upload_s = seconds_since(t_upload);
    host = Weights<float>{};
    const double weight_bytes = double(used_device_bytes() - used0);
    std::printf(
        "config: %.2fB parameters, %.2fB active per token; init %.2f s (host), upload %.2f s (%.2f GB)\n",
        double(parameter_count(cfg)) / 1e9, active_params(cfg) / 1e9, init_s, upload_s, weight_bytes / 1e9);
    const double at_bandwidth = weight_bytes / (h2d * 1e9);
    row("init + upload of the 1B model", "host init, bf16 upload", init_s + upload_s, "s", at_bandwidth,
        "s at H2D", at_bandwidth / (init_s + upload_s), "<= 3 s", init_s + upload_s <= 3.0);
    dev::WorkspacePtr ws;
    const int64_t V = cfg.vocab_size, H = cfg.hidden_size;

    // cuda_attention = "cudnn": the same context's stream and products, attention by cuDNN (made
    // for the first path that asks; a cuDNN that cannot be loaded skips those paths, saying why).
    std::unique_ptr<CudnnAttention> fused;
    std::unique_ptr<CudaOps> fused_ops;
    CudaOps& kernel_ops = ops;
    for (const BackendOptions& o : options) {
      engine.set_options(o);
      const std::string path = path_name(o);
      if (o.attention == mlpt::ref::AttentionLibrary::cudnn && !fused_ops) {
        try {
          fused = std::make_unique<CudnnAttention>(ctx.stream);
        } catch (const std::exception& e) {
          std::printf("row: %-34s [%-19s] not run: %s\n", "path", path.c_str(), e.what());
          continue;
        }
        Context with_cudnn = ctx;
        with_cudnn.attention = fused.get();
        fused_ops = std::make_unique<CudaOps>(with_cudnn);
      }
      CudaOps& ops = o.attention == mlpt::ref::AttentionLibrary::cudnn ? *fused_ops : kernel_ops;
      ws = dev::make_workspace();  // each path's memory rows count its own workspace
      const bool decode_only = decode_rows_only || o.graphs == mlpt::ref::DecodeGraphMode::decode;
      // Training step: forward, head, logprob gradient, backward (gradients fp32, not applied).
      if (!decode_only) {
        const size_t used_before = used_device_bytes();
        dev::DeviceBatch b;
        const int64_t N = train_seqs * train_len;
        b.tokens.resize(size_t(N));
        for (int64_t i = 0; i < N; ++i) b.tokens[i] = int32_t((i * 7919) % V);
        for (int64_t s = 1; s <= train_seqs; ++s) b.offsets.push_back(s * train_len);
        std::vector<int16_t> experts(size_t(N * cfg.num_layers * cfg.experts_per_token));
        std::vector<Buffer> grads;
        size_t grad_bytes = 0;
        for (const auto& t : w.layout.tensors)
          grads.emplace_back(ops, size_t(t.numel()) * 4), grad_bytes += t.numel() * 4;
        Buffer hidden, inputs;
        DeviceBuffer logits(size_t(N * V) * 4), lse(size_t(N) * 4), lp(size_t(N) * 4), coef(size_t(N) * 4),
            targets(size_t(N) * 4), dl(size_t(N * V) * 2), dh(size_t(N * H) * 2);
        check(cudaMemset(targets.get(), 0, targets.bytes()), "memset");
        std::vector<float> c(size_t(N), -1.f / float(N));
        check(cudaMemcpy(coef.get(), c.data(), c.size() * 4, cudaMemcpyHostToDevice), "copy");
        auto train_step = [&] {
          b.routed_experts = experts.data();
          dev::forward_hidden(ops, w, b, *ws, hidden, &inputs);
          const bf16* hb = as_cuda(hidden.as<mlpt::ref::bf16>());
          logits_forward(ctx, N, V, H, hb, as_cuda(w.bf(w.layout.lm_head)), logits.as<float>());
          token_logprobs(ctx, N, V, V, logits.as<float>(), targets.as<int32_t>(), lp.as<float>(),
                         lse.as<float>());
          token_logprobs_backward(ctx, N, V, V, logits.as<float>(), lse.as<float>(), targets.as<int32_t>(),
                                  coef.as<float>(), dl.as<bf16>());
          linear_backward_input(ctx, N, V, H, dl.as<bf16>(), as_cuda(w.bf(w.layout.lm_head)), dh.as<bf16>(),
                                false);
          linear_backward_weight(ctx, N, V, H, dl.as<bf16>(), hb, grads[w.layout.lm_head].as<float>());
          b.routed_experts = nullptr;
          dev::backward(ops, w, b, inputs, experts.data(), as_ref(dh.as<bf16>()), grads, true, *ws);
        };
        train_step();  // warm up (allocations)
        ops.synchronize();
        const double per_token = double(used_device_bytes() - used_before - grad_bytes) / double(N);
        const int reps = 3;
        const auto t0 = Clock::now();
        for (int i = 0; i < reps; ++i) train_step();
        ops.synchronize();
        const double tps = double(N) * reps / seconds_since(t0);
        const double tflops = 6.0 * active_params(cfg) * tps / 1e12;
        row("train " + std::to_string(train_seqs) + "x" + std::to_string(train_len) + " MFU", path, tflops,
            "TFLOP/s", peak, "TFLOP/s", tflops / peak, ">= 0.35", tflops / peak >= 0.35);
        std::printf("      train: %.0f tokens/s\n", tps);
        const double model = train_bytes_per_token(cfg);
        std::printf(
            "memory: train [%s] %.1f KB per token (activations and workspace, beyond %.2f GB of fp32 "
            "gradients; the first path also grows the ops' scratch), the model's arithmetic %.1f KB: %.2fx\n",
            path.c_str(), per_token / 1e3, double(grad_bytes) / 1e9, model / 1e3, per_token / model);
      }

      // Decode: one-token steps of the engine's device step (generate_step: forward over per-sequence
      // state and the paged KV cache, LM head, sampling), at batch 1 and at --decode-batch.
      for (const int64_t batch : {int64_t(1), decode_batch}) {
        const int64_t bs = 64;
        const size_t used_before = used_device_bytes();
        const bool graphed = o.graphs == mlpt::ref::DecodeGraphMode::decode;  // + the pad sequence's block
        dev::KvBlockPool pool(ops, cfg,
                              batch * ((prefill + decode_steps + 1 + bs - 1) / bs) + (graphed ? 1 : 0), bs);
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
        ops.synchronize();
        const double per_seq = double(used_device_bytes() - used_before) / double(batch);
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
        std::unique_ptr<dev::DecodeGraphs> graphs;
        if (graphed) graphs = std::make_unique<dev::DecodeGraphs>(ops, cfg, pool, batch);
        auto decode_step = [&] {
          const dev::StepResult r = graphs ? graphs->step(w, step, rows, V)
                                           : dev::generate_step(ops, w, step, rows, V, *ws, scratch);
          std::copy(r.tokens.begin(), r.tokens.end(), step.tokens.begin());  // feed what was drawn
        };
        decode_step();  // warm up
        const auto t0 = Clock::now();
        for (int64_t i = 1; i < decode_steps; ++i) decode_step();
        const double secs = seconds_since(t0), steps = double(decode_steps - 1);
        // Bytes one step must move: the weights it touches (bf16: all but the embedding table and
        // the experts no token of the batch routes to, expected E·(1 − (1 − k/E)^batch) per layer),
        // each sequence's GDN state read + written, and its KV read.
        const double experts =
            3.0 * cfg.num_experts * cfg.moe_intermediate * cfg.hidden_size * cfg.num_layers;
        const double hit =
            1.0 - std::pow(1.0 - double(cfg.experts_per_token) / cfg.num_experts, double(batch));
        const double weights =
            double(parameter_count(cfg)) - experts - double(cfg.vocab_size * cfg.hidden_size) + experts * hit;
        const double gdn_layers = double(cfg.num_layers - cfg.num_attention_layers());
        const double state_bytes =
            gdn_layers * cfg.gdn_value_heads * cfg.gdn_key_dim * cfg.gdn_value_dim * 4.0;
        const double conv_bytes = gdn_layers * double((cfg.conv_kernel - 1) * cfg.conv_dim()) * 2.0;
        const double kv_token =
            double(cfg.num_attention_layers()) * 2 * cfg.num_kv_heads * cfg.head_dim * 2.0;
        const double kv_bytes = kv_token * double(prefill + decode_steps / 2);
        const double bytes = weights * 2 + double(batch) * (2 * state_bytes + kv_bytes);
        const double gbps = bytes * steps / secs / 1e9;
        row("decode b" + std::to_string(batch) + " bytes/s", path, gbps, "GB/s", bw, "GB/s", gbps / bw,
            batch == 1 ? ">= 0.60" : ">= 0.50", gbps / bw >= (batch == 1 ? 0.6 : 0.5));
        std::printf("      decode b%lld: %.0f tokens/s, %.2f ms/step\n", (long long)batch,
                    double(batch) * steps / secs, secs / steps * 1e3);
        if (graphs)
          std::printf("      decode b%lld graphs: recorded %lld, replayed %lld, run unrecorded %lld\n",
                      (long long)batch, (long long)graphs->stats().recorded,
                      (long long)graphs->stats().replayed, (long long)graphs->stats().unrecorded);
        const double model_seq =
            state_bytes + conv_bytes + kv_token * double((prefill + decode_steps + 1 + bs - 1) / bs * bs);
        std::printf(
            "memory: decode b%lld [%s] %.2f MB per sequence (state, windows, KV blocks), the model's "
            "arithmetic %.2f MB: %.2fx\n",
            (long long)batch, path.c_str(), per_seq / 1e6, model_seq / 1e6, per_seq / model_seq);
      }

      // Prefill of one long prompt: the engine's step over a fresh state.
      if (prefill_len > 0 && !decode_only) {
        const int64_t bs = 64;
        dev::KvBlockPool pool(ops, cfg, (prefill_len + bs) / bs + 1, bs);
        dev::DeviceSequenceState state(ops, cfg);
        pool.reserve(state.blocks, prefill_len + 1);
        dev::DeviceBatch pre;
        pre.kv = &pool.cache();
        for (int64_t i = 0; i < prefill_len; ++i) pre.tokens.push_back(int32_t((i * 17 + 3) % V));
        pre.offsets.push_back(prefill_len);
        pre.states.push_back(&state);
        dev::SampleRows rows;
        rows.segment.push_back(0);
        rows.params.push_back(SamplingRow{1.f, 1.f, 1, 0});
        rows.host_logits.push_back(false);
        dev::StepScratch scratch;
        const auto t0 = Clock::now();
        dev::generate_step(ops, w, pre, rows, V, *ws, scratch);
        const double secs = seconds_since(t0);
        const double Nf = double(prefill_len);
        const double gdn_layers = double(cfg.num_layers - cfg.num_attention_layers());
        const double flops = 2 * active_params(cfg) * Nf +
                             double(cfg.num_attention_layers()) * attention_forward_flops(cfg, Nf) +
                             gdn_layers * gdn_forward_flops(cfg, Nf);
        const double tflops = flops / secs / 1e12;
        row("prefill " + std::to_string(prefill_len / 1024) + "k MFU", path, tflops, "TFLOP/s", peak,
            "TFLOP/s", tflops / peak, ">= 0.40", tflops / peak >= 0.4);
        std::printf("      prefill %lld tokens: %.2f s (first call: includes the workspace's growth)\n",
                    (long long)prefill_len, secs);
      }
      std::printf(
          "      [%s] cuBLASLt shapes planned %zu (heuristic calls %zu), products without an algorithm %zu\n",
          path.c_str(), engine.plans().size(), engine.plans().misses(), engine.fallbacks());
    }
    engine.set_options(BackendOptions{});
    if (decode_rows_only) seq_lens.clear();
    for (int64_t N : parse_lengths(seq_lens)) bench_attention(ctx, nullptr, cfg, N, peak);
    try {  // the library path: its own rows, or why it could not run
      CudnnAttention fused(ctx.stream);
      std::printf("      cuDNN %zu\n", fused.library_version());
      for (int64_t N : parse_lengths(seq_lens)) bench_attention(ctx, &fused, cfg, N, peak);
      std::printf("      cuDNN attention plans built %zu, reused %zu\n", fused.plans_built(),
                  fused.plans_reused());
    } catch (const std::exception& e) {
      std::printf("row: %-34s [%-19s] not run: %s\n", "attention fwd+bwd MFU", "cudnn fused", e.what());
    }
    for (int64_t N : parse_lengths(seq_lens)) bench_gdn(ctx, cfg, N, peak);
    ws.reset();
    destroy_context(ctx);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_reference_cuda: FAILED: %s\n", e.what());
    return 1;
  }
  return 0;
}
