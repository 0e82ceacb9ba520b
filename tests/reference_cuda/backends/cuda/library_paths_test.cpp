// The library paths of the CUDA backend against the paths they replace and the CPU oracle, on the
// shapes the ~1B bench model multiplies (hidden 2048, GDN and attention projections, shared and
// routed experts of 512, router of 16 experts, LM head of 32768):
//   cuda_gemm = cublaslt vs cublas: every dense product (forward, input and weight gradients, fp32
//     logits), and every cuBLASLt product found an algorithm (none fell back to cublasGemmEx);
//   cuda_experts = grouped vs per_expert vs device_sized: the routed experts forward and backward
//     (device_sized's forward takes the per-slot form at 1 row of 16 experts and 5 rows of 64, the
//     all-experts form at 32 and 61 rows, the grouped form at 700).
// Tolerances (max |a − b| / max |b|, cuda_testing.hpp): bf16 outputs 1e-2 (each side rounds once to
// bf16, 2^-9 relative, after fp32 sums in different orders); fp32 outputs 1e-5 (fp32 sums of K
// bf16 products in different orders: K · 2^-24 relative at K = 2048 is 1.2e-4 in the worst case,
// ~sqrt(K) · 2^-24 = 2.7e-6 in practice); experts 3e-2 as ops_test.cpp (two products with bf16
// intermediates).
#include <catch2/catch.hpp>
#include <tuple>

#include "backends/cpu/linear.hpp"
#include "backends/cpu/moe.hpp"
#include "backends/cuda/gemm.hpp"
#include "backends/cuda/linear.hpp"
#include "backends/cuda/moe.hpp"
#include "cuda_testing.hpp"

using namespace cuda_testing;
namespace cpu = mlpt::ref::cpu;
namespace gpu = mlpt::ref::cuda;
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
