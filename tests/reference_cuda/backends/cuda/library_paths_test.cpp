// The library paths of the CUDA backend against the paths they replace and the CPU oracle, on the
// shapes the ~1B bench model multiplies (hidden 2048, GDN and attention projections, shared and
// routed experts of 512, router of 16 experts, LM head of 32768):
//   cuda_gemm = cublaslt vs cublas: every dense product (forward, input and weight gradients, fp32
//     logits), and every cuBLASLt product found an algorithm (none fell back to cublasGemmEx);
//   cuda_experts = grouped vs per_expert vs device_sized: the routed experts forward and backward
//     (device_sized's forward takes the per-slot form at 1 row of 16 experts and 5 rows of 64, the
//     all-experts form at 32 and 61 rows, the grouped form at 700);
//   cuda_attention = cudnn vs kernel (cuDNN's fused attention through its graph API, against the
//     flash-style kernels and the CPU): head_dim 256 with grouped KV heads (16/2, 8/2) and plain
//     heads at 64, packed batches of sequences of different lengths (1 to 1500 tokens), forward and
//     backward, each backward after the other path's forward (both write the same softmax
//     statistics); the plan cache (one plan per shape key, reused) and the per-sequence inputs made
//     on the device against their host reference.
// Tolerances (max |a − b| / max |b|, cuda_testing.hpp): bf16 outputs 1e-2 (each side rounds once to
// bf16, 2^-9 relative, after fp32 sums in different orders); fp32 outputs 1e-5 (fp32 sums of K
// bf16 products in different orders: K · 2^-24 relative at K = 2048 is 1.2e-4 in the worst case,
// ~sqrt(K) · 2^-24 = 2.7e-6 in practice); experts 3e-2 as ops_test.cpp (two products with bf16
// intermediates). Attention as ops_test.cpp: outputs 1e-2 (cuDNN also rounds the probabilities to
// bf16 before P·V: another 2^-9 of a convex combination of V's rows), gradients 3e-2 (products of
// bf16 P, dS and dO); softmax statistics 1e-3 (fp32 on both sides from the same bf16 scores, sums
// in another order).
#include <catch2/catch.hpp>
#include <tuple>

#include "backends/cpu/attention.hpp"
#include "backends/cpu/linear.hpp"
#include "backends/cpu/moe.hpp"
#include "backends/cuda/attention.hpp"
#include "backends/cuda/cuda_ops.hpp"
#include "backends/cuda/cudnn_attention.hpp"
#include "backends/cuda/gemm.hpp"
#include "backends/cuda/linear.hpp"
#include "backends/cuda/moe.hpp"
#include "backends/cuda/sdpa_offsets.hpp"
#include "cuda_testing.hpp"
#include "device_model/sdpa_plan.hpp"

using namespace cuda_testing;
namespace cpu = mlpt::ref::cpu;
namespace gpu = mlpt::ref::cuda;
using mlpt::ref::AttentionLibrary;
using mlpt::ref::BackendOptions;
using mlpt::ref::ExpertGemm;
using mlpt::ref::GemmLibrary;

namespace {

struct Ctx {
  gpu::Context ctx;
  explicit Ctx(const BackendOptions& o) : ctx(gpu::create_context(o)) {}
  ~Ctx() { gpu::destroy_context(ctx); }
  operator const gpu::Context&() const { return ctx; }
};

BackendOptions with_gemm(GemmLibrary g) {
  BackendOptions o;
  o.gemm = g;
  return o;
}

struct AttentionCase {
  gpu::AttentionShape shape;
  std::vector<int64_t> lengths;
  bool with_cpu;  // the O(T²) CPU oracle only where it is quick
};

BackendOptions with_attention(AttentionLibrary a) {
  BackendOptions o;
  o.attention = a;
  return o;
}

#define CHECK_CLOSE(a, b, tol)                \
  do {                                        \
    const double err_ = scaled_error(a, b);   \
    INFO(#a << " vs " << #b << ": " << err_); \
    CHECK(err_ < (tol));                      \
  } while (0)

}  // namespace

TEST_CASE("gemm paths: cuBLASLt and cuBLAS agree with each other and the CPU on the model's shapes") {
  REQUIRE(have_gpu());
  Ctx blas(with_gemm(GemmLibrary::cublas)), lt(with_gemm(GemmLibrary::cublaslt));
  std::mt19937_64 rng(11);
  // (N, K) of the bench model's weights, each at decode (1, 32 rows) and training row counts.
  const std::vector<std::pair<int64_t, int64_t>> weights{{4096, 2048}, {2048, 2048}, {16, 2048},
                                                         {256, 2048},  {2048, 4096}, {512, 2048},
                                                         {2048, 512},  {1024, 2048}};
  for (int64_t M : {int64_t(1), int64_t(32), int64_t(333)})
    for (auto [N, K] : weights) {
      INFO("M " << M << " N " << N << " K " << K);
      auto x = random_bf16(rng, M * K), W = random_bf16(rng, N * K, -0.05, 0.05),
           dy = random_bf16(rng, M * N);
      std::vector<float> y(M * N), dx(M * K), dW(N * K, 0.f);
      cpu::linear_forward<float>(M, N, K, x.host.data(), W.host.data(), y.data());
      cpu::linear_backward_input<float>(M, N, K, dy.host.data(), W.host.data(), dx.data(), false);
      cpu::linear_backward_weight<float>(M, N, K, dy.host.data(), x.host.data(), dW.data());
      std::vector<std::vector<float>> ys, dxs, dWs, logits;
      for (const Ctx* c : {&blas, &lt}) {
        DeviceVec<bf16> gy(M * N), gdx(M * K);
        DeviceVec<float> gdW(N * K), gl(M * N);
        gpu::linear_forward(*c, M, N, K, x.get(), W.get(), gy.get());
        gpu::linear_backward_input(*c, M, N, K, dy.get(), W.get(), gdx.get(), false);
        gpu::linear_backward_weight(*c, M, N, K, dy.get(), x.get(), gdW.get());
        gpu::linear_forward_fp32(*c, M, N, K, x.get(), W.get(), gl.get());
        ys.push_back(to_float(gy.download())), dxs.push_back(to_float(gdx.download()));
        dWs.push_back(gdW.download()), logits.push_back(gl.download());
      }
      for (int p = 0; p < 2; ++p) {
        INFO((p ? "cublaslt" : "cublas") << " vs the CPU");
        CHECK_CLOSE(ys[p], y, 1e-2);
        CHECK_CLOSE(dxs[p], dx, 1e-2);
        CHECK_CLOSE(dWs[p], dW, 1e-5);
        CHECK_CLOSE(logits[p], y, 1e-5);
      }
      CHECK_CLOSE(ys[1], ys[0], 1e-2);
      CHECK_CLOSE(dWs[1], dWs[0], 1e-5);
      // Accumulating forms: y += x·Wᵀ doubles y; dx += dy·W doubles dx.
      DeviceVec<bf16> acc(M * N);
      gpu::linear_forward(lt, M, N, K, x.get(), W.get(), acc.get());
      gpu::linear_forward(lt, M, N, K, x.get(), W.get(), acc.get(), true);
      std::vector<float> twice(y);
      for (float& v : twice) v *= 2;
      CHECK_CLOSE(to_float(acc.download()), twice, 1e-2);
    }
  const gpu::GemmEngine& e = gpu::gemm_engine(lt);
  INFO("cuBLASLt shapes " << e.plans().size() << ", fallbacks " << e.fallbacks());
  CHECK(e.fallbacks() == 0);                          // every product ran through cublasLtMatmul
  CHECK(e.plans().misses() > 0);                      // plans were made...
  CHECK(e.plans().hits() > 0);                        // ...and reused for the repeated shapes
  CHECK(gpu::gemm_engine(blas).plans().size() == 0);  // the cuBLAS path makes none
}

TEST_CASE("expert paths: grouped and per-expert products agree forward and backward, with the CPU") {
  REQUIRE(have_gpu());
  std::mt19937_64 rng(12);
  for (auto [rows, E, k, H, I] :
       std::vector<std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t>>{{1, 16, 2, 2048, 512},
                                                                            {32, 16, 2, 2048, 512},
                                                                            {700, 16, 2, 256, 128},
                                                                            {61, 64, 8, 128, 64},
                                                                            {5, 64, 8, 128, 64}}) {
    INFO("rows " << rows << " E " << E << " k " << k << " H " << H << " I " << I);
    const cpu::MoeShape cs{H, E, k, I, true};
    auto logits = random_floats(rng, rows * E, -3, 3, false);
    std::vector<int16_t> ex(rows * k);
    std::vector<float> w(rows * k);
    REQUIRE(cpu::route<float>(cs, rows, logits.data(), nullptr, ex.data(), w.data()));
    auto x = random_bf16(rng, rows * H), gu = random_bf16(rng, E * 2 * I * H, -0.05, 0.05);
    auto down = random_bf16(rng, E * H * I, -0.05, 0.05), dy = random_bf16(rng, rows * H);
    std::vector<float> y(rows * H, 0.f), dx(rows * H, 0.f), dwe(rows * k), dgu(gu.host.size(), 0.f),
        ddown(down.host.size(), 0.f);
    cpu::experts_forward<float>(cs, rows, x.host.data(), ex.data(), w.data(), gu.host.data(),
                                down.host.data(), y.data());
    cpu::experts_backward<float>(cs, rows, x.host.data(), ex.data(), w.data(), gu.host.data(),
                                 down.host.data(), dy.host.data(), dx.data(), dwe.data(), dgu.data(),
                                 ddown.data());
    DeviceVec<int16_t> gex(ex);
    DeviceVec<float> gw(w);
    std::vector<std::vector<float>> ys, dxs, dgus;
    for (ExpertGemm path : {ExpertGemm::grouped, ExpertGemm::per_expert, ExpertGemm::device_sized})
      for (GemmLibrary lib : {GemmLibrary::cublas, GemmLibrary::cublaslt}) {
        INFO(mlpt::ref::to_string(path) << " over " << mlpt::ref::to_string(lib));
        BackendOptions o;
        o.experts = path, o.gemm = lib;
        Ctx c(o);
        DeviceVec<bf16> gy(rows * H), gdx(rows * H);
        DeviceVec<float> gdwe(rows * k), gdgu(dgu.size()), gddown(ddown.size());
        gpu::DeviceBuffer scratch;
        gpu::experts_forward(c, cs, rows, x.get(), gex.get(), gw.get(), gu.get(), down.get(), gy.get(),
                             scratch);
        gpu::experts_backward(c, cs, rows, x.get(), gex.get(), gw.get(), gu.get(), down.get(), dy.get(),
                              gdx.get(), false, gdwe.get(), gdgu.get(), gddown.get(), scratch);
        ys.push_back(to_float(gy.download())), dxs.push_back(to_float(gdx.download()));
        dgus.push_back(gdgu.download());
        CHECK_CLOSE(ys.back(), y, 3e-2);
        CHECK_CLOSE(dxs.back(), dx, 3e-2);
        CHECK_CLOSE(gdwe.download(), dwe, 3e-2);
        CHECK_CLOSE(dgus.back(), dgu, 3e-2);
        CHECK_CLOSE(gddown.download(), ddown, 3e-2);
      }
    for (size_t p = 1; p < ys.size(); ++p) {  // each path against grouped over cuBLAS (the checked one)
      CHECK_CLOSE(ys[p], ys[0], 1e-2);
      CHECK_CLOSE(dxs[p], dxs[0], 1e-2);
      CHECK_CLOSE(dgus[p], dgus[0], 1e-2);
    }
  }
}

TEST_CASE("attention paths: cuDNN's fused attention matches the kernels and the CPU, forward and backward") {
  REQUIRE(have_gpu());
  Ctx kernel(with_attention(AttentionLibrary::kernel)), fused(with_attention(AttentionLibrary::cudnn));
  REQUIRE(fused.ctx.attention != nullptr);
  REQUIRE(kernel.ctx.attention == nullptr);
  gpu::CudnnAttention& lib = *fused.ctx.attention;
  INFO("cuDNN " << lib.library_version());
  std::mt19937_64 rng(31);
  for (const AttentionCase& c :
       std::vector<AttentionCase>{{{16, 2, 256}, {300, 77}, true},
                                  {{4, 4, 64}, {1, 130, 64}, true},
                                  {{8, 2, 256}, {1500, 37}, false},
                                  {{16, 2, 256}, {280, 100}, false}}) {  // same bucket as case 1
    const auto& s = c.shape;
    const auto off = offsets_of(c.lengths);
    const int64_t S = static_cast<int64_t>(c.lengths.size()), T = off.back();
    const int64_t H = s.num_heads, Hkv = s.num_kv_heads, D = s.head_dim;
    INFO("H " << H << " Hkv " << Hkv << " D " << D << " tokens " << T << " sequences " << S);
    auto q = random_bf16(rng, T * H * D, -2, 2), k = random_bf16(rng, T * Hkv * D, -2, 2);
    auto v = random_bf16(rng, T * Hkv * D), dout = random_bf16(rng, T * H * D);
    DeviceVec<int64_t> goff(off);
    // Forward on both paths.
    DeviceVec<bf16> out_k(T * H * D), out_f(T * H * D);
    DeviceVec<float> lse_k(T * H), lse_f(T * H);
    gpu::attention_forward(kernel, s, goff.get(), goff.get(), S, T, q.get(), k.get(), v.get(), out_k.get(),
                           lse_k.get());
    REQUIRE(
        lib.forward(s, goff.get(), goff.get(), S, T, q.get(), k.get(), v.get(), out_f.get(), lse_f.get()));
    const std::vector<float> ok = to_float(out_k.download());
    CHECK_CLOSE(out_f.download(), ok, 1e-2);
    CHECK_CLOSE(lse_f.download(), lse_k.download(), 1e-3);
    // Backward on both paths, and each after the other's forward.
    DeviceVec<bf16> dq_k(T * H * D), dk_k(T * Hkv * D), dv_k(T * Hkv * D);
    DeviceVec<bf16> dq_f(T * H * D), dk_f(T * Hkv * D), dv_f(T * Hkv * D);
    DeviceVec<bf16> dq_x(T * H * D), dk_x(T * Hkv * D), dv_x(T * Hkv * D);
    gpu::DeviceBuffer scratch;
    gpu::attention_backward(kernel, s, goff.get(), goff.get(), S, T, T, q.get(), k.get(), v.get(),
                            out_k.get(), lse_k.get(), dout.get(), dq_k.get(), dk_k.get(), dv_k.get(),
                            scratch);
    lib.backward(s, goff.get(), goff.get(), S, T, T, q.get(), k.get(), v.get(), out_f.get(), lse_f.get(),
                 dout.get(), dq_f.get(), dk_f.get(), dv_f.get());
    const std::vector<float> dqk = to_float(dq_k.download()), dkk = to_float(dk_k.download()),
                             dvk = to_float(dv_k.download());
    CHECK_CLOSE(dq_f.download(), dqk, 3e-2);
    CHECK_CLOSE(dk_f.download(), dkk, 3e-2);
    CHECK_CLOSE(dv_f.download(), dvk, 3e-2);
    lib.backward(s, goff.get(), goff.get(), S, T, T, q.get(), k.get(), v.get(), out_k.get(), lse_k.get(),
                 dout.get(), dq_x.get(), dk_x.get(), dv_x.get());
    CHECK_CLOSE(dq_x.download(), dqk, 3e-2);
    CHECK_CLOSE(dk_x.download(), dkk, 3e-2);
    gpu::attention_backward(kernel, s, goff.get(), goff.get(), S, T, T, q.get(), k.get(), v.get(),
                            out_f.get(), lse_f.get(), dout.get(), dq_x.get(), dk_x.get(), dv_x.get(),
                            scratch);
    CHECK_CLOSE(dq_x.download(), dqk, 3e-2);
    CHECK_CLOSE(dv_x.download(), dvk, 3e-2);
    if (c.with_cpu) {  // both against the oracle, so agreement is not a shared mistake
      const cpu::AttentionShape cs{H, Hkv, D};
      std::vector<float> out(T * H * D), dq(T * H * D), dk(T * Hkv * D), dv(T * Hkv * D);
      cpu::attention_forward<float>(cs, off.data(), off.data(), S, q.host.data(), k.host.data(),
                                    v.host.data(), out.data());
      cpu::attention_backward<float>(cs, off.data(), off.data(), S, q.host.data(), k.host.data(),
                                     v.host.data(), dout.host.data(), dq.data(), dk.data(), dv.data());
      CHECK_CLOSE(out_f.download(), out, 1e-2);
      CHECK_CLOSE(dq_f.download(), dq, 3e-2);
      CHECK_CLOSE(dk_f.download(), dk, 3e-2);
      CHECK_CLOSE(dv_f.download(), dv, 3e-2);
    }
  }
  // Four cases, the last one in the first one's buckets: three forward and three backward plans,
  // the rest reused; no call fell back to the kernels.
  CHECK(lib.plans_built() == 6);
  CHECK(lib.plans_reused() >= 4);
  CHECK(lib.kernel_fallbacks() == 0);
}

TEST_CASE("attention paths: the library's per-sequence inputs are the host reference's") {
  REQUIRE(have_gpu());
  Ctx ctx(BackendOptions{});
  const std::vector<int64_t> q_off{0, 3, 3, 40}, kv_off{0, 10, 12, 60};
  const int64_t S = 3, H = 16, Hkv = 2, D = 256;
  DeviceVec<int64_t> gq(q_off), gkv(kv_off);
  DeviceVec<char> mem(gpu::SdpaSequenceInputs::bytes(S));
  const gpu::SdpaSequenceInputs in = gpu::SdpaSequenceInputs::carve(mem.get(), S);
  gpu::sdpa_sequence_inputs(ctx, gq.get(), gkv.get(), S, H, Hkv, D, in);
  check(cudaDeviceSynchronize(), "test: synchronise");
  auto down = [](const auto* p, size_t n) {
    std::vector<std::remove_const_t<std::remove_pointer_t<decltype(p)>>> h(n);
    check(cudaMemcpy(h.data(), p, n * sizeof(h[0]), cudaMemcpyDeviceToHost), "test: download");
    return h;
  };
  std::vector<int32_t> ql(S), kl(S);
  std::vector<int64_t> qr(S + 1), kr(S + 1), sr(S + 1);
  mlpt::ref::sdpa_lengths(q_off.data(), S, ql.data());
  mlpt::ref::sdpa_lengths(kv_off.data(), S, kl.data());
  mlpt::ref::sdpa_ragged_offsets(q_off.data(), S, H * D, qr.data());
  mlpt::ref::sdpa_ragged_offsets(kv_off.data(), S, Hkv * D, kr.data());
  mlpt::ref::sdpa_ragged_offsets(q_off.data(), S, H, sr.data());
  CHECK(down(in.q_lengths, S) == ql);
  CHECK(down(in.kv_lengths, S) == kl);
  CHECK(down(in.q_rows, S + 1) == qr);
  CHECK(down(in.kv_rows, S + 1) == kr);
  CHECK(down(in.stats_rows, S + 1) == sr);
}

TEST_CASE("attention paths: cuda_attention = cudnn through the ops interface, other keys by the kernels") {
  REQUIRE(have_gpu());
  Ctx fused(with_attention(AttentionLibrary::cudnn));
  gpu::CudaOps ops(fused);
  gpu::CudnnAttention& lib = *fused.ctx.attention;
  std::mt19937_64 rng(32);
  const gpu::AttentionShape s{8, 2, 256};
  const std::vector<int64_t> q_len{20, 9}, kv_len{50, 9};
  const auto qo = offsets_of(q_len), ko = offsets_of(kv_len);
  const int64_t S = 2, Tq = qo.back(), Tk = ko.back();
  auto q = random_bf16(rng, Tq * 8 * 256, -2, 2), k = random_bf16(rng, Tk * 2 * 256, -2, 2);
  auto v = random_bf16(rng, Tk * 2 * 256);
  DeviceVec<int64_t> gqo(qo), gko(ko);
  DeviceVec<bf16> out(Tq * 8 * 256);
  DeviceVec<float> lse(Tq * 8);
  // Queries that are the last of longer key sequences (a shared prefix): the kv token count is not
  // known on the host, so the kernels run, and say so in the count.
  ops.attention_forward(s, gqo.get(), gko.get(), S, Tq, gpu::as_ref(q.get()), gpu::as_ref(k.get()),
                        gpu::as_ref(v.get()), gpu::as_ref(out.get()), lse.get());
  CHECK(lib.kernel_fallbacks() == 1);
  CHECK(lib.plans_built() == 0);
  const cpu::AttentionShape cs{8, 2, 256};
  std::vector<float> ref(Tq * 8 * 256);
  cpu::attention_forward<float>(cs, qo.data(), ko.data(), S, q.host.data(), k.host.data(), v.host.data(),
                                ref.data());
  CHECK_CLOSE(out.download(), ref, 1e-2);
  // Self-attention over the packed batch goes to cuDNN.
  auto k2 = random_bf16(rng, Tq * 2 * 256, -2, 2), v2 = random_bf16(rng, Tq * 2 * 256);
  DeviceVec<bf16> out2(Tq * 8 * 256);
  ops.attention_forward(s, gqo.get(), gqo.get(), S, Tq, gpu::as_ref(q.get()), gpu::as_ref(k2.get()),
                        gpu::as_ref(v2.get()), gpu::as_ref(out2.get()), nullptr);  // lse may be NULL
  cpu::attention_forward<float>(cs, qo.data(), qo.data(), S, q.host.data(), k2.host.data(), v2.host.data(),
                                ref.data());
  CHECK_CLOSE(out2.download(), ref, 1e-2);
  CHECK(lib.plans_built() == 1);
  CHECK(lib.kernel_fallbacks() == 1);
}

namespace {

// A paged cache holding every key and value of `kv_len` tokens per sequence, blocks handed out in
// reverse order, with the queries (the last q_len tokens of each) and the CPU's output for them.
struct PagedSetup {
  gpu::AttentionShape shape;
  std::vector<int64_t> qo, ko;
  int64_t S, Tq, Tk, block_size, max_blocks = 0;
  Bf16Tensor q, k, v;
  DeviceVec<int32_t> table;
  DeviceVec<bf16> k_pool, v_pool;
  DeviceVec<int64_t> q_offsets, kv_offsets, kv_lengths;
  std::vector<float> reference;

  PagedSetup(const gpu::Context& ctx, std::mt19937_64& rng, const gpu::AttentionShape& s,
             const std::vector<int64_t>& q_len, const std::vector<int64_t>& kv_len, int64_t bs)
      : shape(s),
        qo(offsets_of(q_len)),
        ko(offsets_of(kv_len)),
        S(int64_t(q_len.size())),
        Tq(qo.back()),
        Tk(ko.back()),
        block_size(bs),
        q(random_bf16(rng, size_t(Tq * s.num_heads * s.head_dim), -2, 2)),
        k(random_bf16(rng, size_t(Tk * s.num_kv_heads * s.head_dim), -2, 2)),
        v(random_bf16(rng, size_t(Tk * s.num_kv_heads * s.head_dim))),
        q_offsets(qo),
        kv_offsets(ko),
        kv_lengths(kv_len) {
    for (int64_t l : kv_len) max_blocks = std::max(max_blocks, (l + bs - 1) / bs);
    const int64_t blocks = S * max_blocks, row = s.num_kv_heads * s.head_dim;
    std::vector<int32_t> t(static_cast<size_t>(blocks));
    for (int64_t i = 0; i < blocks; ++i) t[size_t(i)] = static_cast<int32_t>(blocks - 1 - i);
    table = DeviceVec<int32_t>(t);
    k_pool = DeviceVec<bf16>(size_t(blocks * bs * row));
    v_pool = DeviceVec<bf16>(size_t(blocks * bs * row));
    gpu::paged_kv_write(ctx, s, kv_offsets.get(), kv_lengths.get(), S, Tk, k.get(), v.get(), k_pool.get(),
                        v_pool.get(), table.get(), max_blocks, bs);
    check(cudaDeviceSynchronize(), "test: synchronise");
    reference.resize(size_t(Tq * s.num_heads * s.head_dim));
    cpu::attention_forward<float>({s.num_heads, s.num_kv_heads, s.head_dim}, qo.data(), ko.data(), S,
                                  q.host.data(), k.host.data(), v.host.data(), reference.data());
  }
  void kernel(const gpu::Context& ctx, bf16* out) const {
    gpu::attention_forward_paged(ctx, shape, q_offsets.get(), kv_lengths.get(), S, Tq, q.get(), k_pool.get(),
                                 v_pool.get(), table.get(), max_blocks, block_size, out);
  }
  void fused(gpu::CudnnAttention& lib, bf16* out) const {
    lib.forward_paged(shape, q_offsets.get(), kv_lengths.get(), S, Tq, q.get(), k_pool.get(), v_pool.get(),
                      table.get(), max_blocks, block_size, out);
  }
};

}  // namespace

TEST_CASE(
    "attention paths: cuDNN against the paged cache matches the kernels (decode and prefill with state)") {
  REQUIRE(have_gpu());
  Ctx kernel(with_attention(AttentionLibrary::kernel)), fused(with_attention(AttentionLibrary::cudnn));
  gpu::CudnnAttention& lib = *fused.ctx.attention;
  std::mt19937_64 rng(33);
  struct Paged {
    gpu::AttentionShape shape;
    std::vector<int64_t> q_len, kv_len;
    int64_t block_size;
  };
  // Decode (one new token per sequence), a prefill continuing state, and a table narrower than its
  // power-of-two width.
  for (const Paged& c : std::vector<Paged>{{{16, 2, 256}, {1, 1, 1, 1}, {1, 70, 300, 129}, 64},
                                           {{8, 2, 256}, {40, 7}, {40, 200}, 16},
                                           {{4, 4, 64}, {3}, {337}, 64}}) {
    INFO("H " << c.shape.num_heads << " Hkv " << c.shape.num_kv_heads << " D " << c.shape.head_dim
              << " block " << c.block_size);
    const PagedSetup p(kernel, rng, c.shape, c.q_len, c.kv_len, c.block_size);
    const size_t n = p.reference.size();
    DeviceVec<bf16> out_k(n), out_f(n);
    p.kernel(kernel, out_k.get());
    p.fused(lib, out_f.get());
    const std::vector<float> ok = to_float(out_k.download());
    CHECK_CLOSE(out_f.download(), ok, 1e-2);
    CHECK_CLOSE(out_f.download(), p.reference, 1e-2);  // the paged kernel itself is ops_test.cpp's
  }
  CHECK(lib.plans_built() == 3);
}

TEST_CASE(
    "attention paths: cuDNN's paged forward records into a CUDA graph, its plan built while recording") {
  REQUIRE(have_gpu());
  Ctx fused(with_attention(AttentionLibrary::cudnn));
  gpu::CudnnAttention& lib = *fused.ctx.attention;
  std::mt19937_64 rng(34);
  const PagedSetup p(fused, rng, {16, 2, 256}, {1, 1, 1}, {5, 64, 190}, 64);
  DeviceVec<bf16> out(p.reference.size());
  // The first call of the shape happens while recording, as the decode graphs' first step does.
  cudaGraph_t graph = nullptr;
  check(cudaStreamBeginCapture(fused.ctx.stream, cudaStreamCaptureModeThreadLocal), "test: begin capture");
  try {
    p.fused(lib, out.get());
  } catch (...) {
    cudaStreamEndCapture(fused.ctx.stream, &graph);
    throw;
  }
  check(cudaStreamEndCapture(fused.ctx.stream, &graph), "test: end capture");
  cudaGraphExec_t exec = nullptr;
  check(cudaGraphInstantiate(&exec, graph, 0), "test: instantiate");
  CHECK(to_float(out.download()) == std::vector<float>(p.reference.size(), 0.f));  // recorded, not run
  check(cudaGraphLaunch(exec, fused.ctx.stream), "test: replay");
  CHECK_CLOSE(out.download(), p.reference, 1e-2);
  CHECK(lib.plans_built() == 1);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
}
