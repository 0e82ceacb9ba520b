// Every op of the CUDA backend, forward and backward, against the CPU backend (the oracle, itself
// checked against float64 finite differences and HF) on random shapes: a test-backend-ops style
// driver. Inputs are bf16-representable so both sides see identical values; the difference is the
// GPU's bf16 rounding of outputs (2^-9 relative per element) and fp32 accumulation order.
//
// Tolerances (max |gpu − cpu| / max |cpu| per tensor, see cuda_testing.hpp), per op:
//   elementwise, norms, conv, rope, embedding ............ 1e-2 (one bf16 rounding: <= 3.9e-3)
//   linear (K <= 512) .................................... 1e-2
//   GDN forward (recurrent, chunked) ..................... 1e-2; backward 2e-2 (bf16 d_out, d_v)
//   attention forward 1e-2; backward 3e-2 (bf16 q, k, v products)
//   experts forward/backward 3e-2 (two GEMMs with bf16 intermediates)
//   router: expert ids exact, weights and d logits 1e-5 (fp32 on both sides, same logits)
//   logprobs 1e-4 absolute (fp32 logits); sampling (with and without top-p, ties): the same ids as
//   model/sampling, logprobs 1e-4
//   optimizer and GRPO loss: 1e-5 relative (fp32 vs the double reference)
#include <catch2/catch.hpp>
#include <cmath>
#include <numeric>

#include "backends/cpu/activations.hpp"
#include "backends/cpu/attention.hpp"
#include "backends/cpu/bf16_ops.hpp"
#include "backends/cpu/conv.hpp"
#include "backends/cpu/gdn.hpp"
#include "backends/cpu/linear.hpp"
#include "backends/cpu/moe.hpp"
#include "backends/cpu/norms.hpp"
#include "backends/cpu/rope.hpp"
#include "backends/cuda/activations.hpp"
#include "backends/cuda/attention.hpp"
#include "backends/cuda/conv.hpp"
#include "backends/cuda/embedding.hpp"
#include "backends/cuda/gdn.hpp"
#include "backends/cuda/head.hpp"
#include "backends/cuda/linear.hpp"
#include "backends/cuda/moe.hpp"
#include "backends/cuda/norms.hpp"
#include "backends/cuda/optimizer.hpp"
#include "backends/cuda/rope.hpp"
#include "change_marks.hpp"
#include "cuda_testing.hpp"
#include "device_model/vocab_head.hpp"
#include "model/sampling.hpp"
#include "trainer/grpo_loss.hpp"

using namespace cuda_testing;
namespace cpu = mlpt::ref::cpu;
namespace gpu = mlpt::ref::cuda;

namespace {

struct Ctx {
  gpu::Context ctx = gpu::create_context();
  ~Ctx() { gpu::destroy_context(ctx); }
  operator const gpu::Context&() const { return ctx; }
};

std::vector<float> zeros(size_t n) { return std::vector<float>(n, 0.f); }

#define CHECK_CLOSE(gpu_values, cpu_values, tol)                 \
  do {                                                           \
    const double err_ = scaled_error(gpu_values, cpu_values);    \
    INFO(#gpu_values << " vs " << #cpu_values << ": " << err_);  \
    CHECK(err_ < (tol));                                         \
  } while (0)

}  // namespace

TEST_CASE("norms: rmsnorm, gated rmsnorm, l2norm forward and backward match the CPU backend") {
  REQUIRE(have_gpu());
  Ctx ctx;
  std::mt19937_64 rng(1);
  for (auto [rows, D] : std::vector<std::pair<int64_t, int64_t>>{{1, 16}, {7, 128}, {33, 960}, {5, 4096}}) {
    INFO("rows " << rows << " D " << D);
    auto x = random_bf16(rng, rows * D, -2, 2), z = random_bf16(rng, rows * D, -3, 3), dy = random_bf16(rng, rows * D);
    auto w = random_floats(rng, D, -0.5, 0.5, true);
    DeviceVec<float> wd(w);
    const double eps = 1e-6;

    std::vector<float> y(rows * D), dx(rows * D), dw = zeros(D);
    cpu::rmsnorm_forward<float>(rows, D, x.host.data(), w.data(), eps, y.data());
    cpu::rmsnorm_backward<float>(rows, D, x.host.data(), w.data(), eps, dy.host.data(), dx.data(), dw.data());
    DeviceVec<bf16> gy(rows * D), gdx(rows * D);
    DeviceVec<float> gdw(D);
    gpu::rmsnorm_forward(ctx, rows, D, x.get(), wd.get(), eps, gy.get());
    gpu::rmsnorm_backward(ctx, rows, D, x.get(), wd.get(), eps, dy.get(), gdx.get(), gdw.get());
    CHECK_CLOSE(gy.download(), y, 1e-2);
    CHECK_CLOSE(gdx.download(), dx, 1e-2);
    CHECK_CLOSE(gdw.download(), dw, 1e-2);

    std::vector<float> do_(rows * D), dz(rows * D), dwg = zeros(D);
    cpu::gated_rmsnorm_forward<float>(rows, D, x.host.data(), z.host.data(), w.data(), eps, y.data());
    cpu::gated_rmsnorm_backward<float>(rows, D, x.host.data(), z.host.data(), w.data(), eps, dy.host.data(),
                                       do_.data(), dz.data(), dwg.data());
    DeviceVec<bf16> gdo(rows * D), gdz(rows * D);
    DeviceVec<float> gdwg(D);
    gpu::gated_rmsnorm_forward(ctx, rows, D, x.get(), z.get(), wd.get(), eps, gy.get());
    gpu::gated_rmsnorm_backward(ctx, rows, D, x.get(), z.get(), wd.get(), eps, dy.get(), gdo.get(), gdz.get(),
                                gdwg.get());
    CHECK_CLOSE(gy.download(), y, 1e-2);
    CHECK_CLOSE(gdo.download(), do_, 1e-2);
    CHECK_CLOSE(gdz.download(), dz, 1e-2);
    CHECK_CLOSE(gdwg.download(), dwg, 1e-2);

    // L2 norm over heads of Dh inside token rows of D (in place, as the GDN reads q/k from the conv output).
    const int64_t Dh = D >= 128 ? 64 : D, heads = D / Dh;
    auto dyl = random_floats(rng, rows * heads * Dh, -1, 1, false);
    DeviceVec<float> gdyl(dyl), gyl(rows * heads * Dh);
    std::vector<float> yl(rows * heads * Dh), dxl = zeros(rows * D);
    cpu::l2norm_forward<float>(rows * heads, Dh, x.host.data(), Dh, 1e-6, 0.125, yl.data());
    cpu::l2norm_backward<float>(rows * heads, Dh, x.host.data(), Dh, 1e-6, 0.125, dyl.data(), dxl.data(), Dh);
    DeviceVec<bf16> gdxl(rows * D);
    gpu::l2norm_forward(ctx, rows * heads, heads, Dh, x.get(), D, 1e-6, 0.125, gyl.get());
    gpu::l2norm_backward(ctx, rows * heads, heads, Dh, x.get(), D, 1e-6, 0.125, gdyl.get(), gdxl.get(), D);
    CHECK_CLOSE(gyl.download(), yl, 1e-5);  // fp32 output
    CHECK_CLOSE(gdxl.download(), dxl, 1e-2);
  }
}

TEST_CASE("activations: GDN gates, sigmoid gate, SwiGLU, shared-expert gate forward and backward") {
  REQUIRE(have_gpu());
  Ctx ctx;
  std::mt19937_64 rng(2);
  for (auto [rows, H] : std::vector<std::pair<int64_t, int64_t>>{{1, 4}, {19, 32}, {300, 64}}) {
    INFO("rows " << rows << " width " << H);
    auto a = random_bf16(rng, rows * H, -25, 25), b = random_bf16(rng, rows * H, -4, 4);
    auto a_log = random_floats(rng, H, -4, 2.7, false), dt = random_floats(rng, H, 0, 2, false);
    auto dg = random_floats(rng, rows * H, -1, 1, false), dbeta = random_floats(rng, rows * H, -1, 1, false);
    std::vector<float> g(rows * H), beta(rows * H), da(rows * H), db(rows * H), dal = zeros(H), ddt = zeros(H);
    cpu::gdn_gates_forward<float>(rows, H, a.host.data(), b.host.data(), a_log.data(), dt.data(), g.data(),
                                  beta.data());
    cpu::gdn_gates_backward<float>(rows, H, a.host.data(), b.host.data(), a_log.data(), dt.data(), dg.data(),
                                   dbeta.data(), da.data(), db.data(), dal.data(), ddt.data());
    DeviceVec<float> galog(a_log), gdt(dt), gg(rows * H), gbeta(rows * H), gdg(dg), gdbeta(dbeta), gdal(H), gddt(H);
    DeviceVec<bf16> gda(rows * H), gdb(rows * H);
    gpu::gdn_gates_forward(ctx, rows, H, a.get(), b.get(), galog.get(), gdt.get(), gg.get(), gbeta.get());
    gpu::gdn_gates_backward(ctx, rows, H, a.get(), b.get(), galog.get(), gdt.get(), gdg.get(), gdbeta.get(), gda.get(),
                            gdb.get(), gdal.get(), gddt.get());
    CHECK_CLOSE(gg.download(), g, 1e-5);
    CHECK_CLOSE(gbeta.download(), beta, 1e-5);
    CHECK_CLOSE(gda.download(), da, 1e-2);
    CHECK_CLOSE(gdb.download(), db, 1e-2);
    CHECK_CLOSE(gdal.download(), dal, 1e-4);
    CHECK_CLOSE(gddt.download(), ddt, 1e-4);

    // Sigmoid gate, reading o and gate interleaved from one [rows, 2H] buffer (as q_proj's output).
    auto og = random_bf16(rng, rows * 2 * H, -3, 3), dy = random_bf16(rng, rows * H);
    std::vector<float> y(rows * H), dog = zeros(rows * 2 * H);
    cpu::sigmoid_gate_forward<float>(rows, H, og.host.data(), 2 * H, og.host.data() + H, 2 * H, y.data());
    cpu::sigmoid_gate_backward<float>(rows, H, og.host.data(), 2 * H, og.host.data() + H, 2 * H, dy.host.data(),
                                      dog.data(), 2 * H, dog.data() + H, 2 * H);
    DeviceVec<bf16> gy(rows * H), gdog(rows * 2 * H);
    gpu::sigmoid_gate_forward(ctx, rows, H, og.get(), 2 * H, og.get() + H, 2 * H, gy.get());
    gpu::sigmoid_gate_backward(ctx, rows, H, og.get(), 2 * H, og.get() + H, 2 * H, dy.get(), gdog.get(), 2 * H,
                               gdog.get() + H, 2 * H);
    CHECK_CLOSE(gy.download(), y, 1e-2);
    CHECK_CLOSE(gdog.download(), dog, 1e-2);

    // SwiGLU on fused gate_up rows.
    std::vector<float> h(rows * H), dgu = zeros(rows * 2 * H);
    cpu::swiglu_forward<float>(rows, H, og.host.data(), og.host.data() + H, 2 * H, h.data());
    cpu::swiglu_backward<float>(rows, H, og.host.data(), og.host.data() + H, 2 * H, dy.host.data(), dgu.data(),
                                dgu.data() + H, 2 * H);
    DeviceVec<bf16> gh(rows * H), gdgu(rows * 2 * H);
    gpu::swiglu_forward(ctx, rows, H, og.get(), og.get() + H, 2 * H, gh.get());
    gpu::swiglu_backward(ctx, rows, H, og.get(), og.get() + H, 2 * H, dy.get(), gdgu.get(), gdgu.get() + H, 2 * H);
    CHECK_CLOSE(gh.download(), h, 1e-2);
    CHECK_CLOSE(gdgu.download(), dgu, 1e-2);

    // Shared-expert gate: y += σ(l) s; reference written out (§2.6, §3).
    auto logit = random_bf16(rng, rows, -3, 3), s = random_bf16(rng, rows * H), y0 = random_bf16(rng, rows * H);
    std::vector<float> ys = y0.host, dl(rows), ds(rows * H);
    for (int64_t r = 0; r < rows; ++r) {
      const float sg = cpu::sigmoid(logit.host[r]);
      float dot = 0;
      for (int64_t i = 0; i < H; ++i) {
        ys[r * H + i] += sg * s.host[r * H + i];
        dot += dy.host[r * H + i] * s.host[r * H + i];
        ds[r * H + i] = sg * dy.host[r * H + i];
      }
      dl[r] = dot * sg * (1 - sg);
    }
    DeviceVec<bf16> gdl(rows), gds(rows * H);
    gpu::scaled_add_forward(ctx, rows, H, logit.get(), s.get(), y0.get());
    gpu::scaled_add_backward(ctx, rows, H, logit.get(), s.get(), dy.get(), gdl.get(), gds.get());
    CHECK_CLOSE(y0.dev.download(), ys, 1e-2);
    CHECK_CLOSE(gdl.download(), dl, 1e-2);
    CHECK_CLOSE(gds.download(), ds, 1e-2);
  }
}

TEST_CASE("conv: causal depthwise conv + SiLU with windows, cache update and backward") {
  REQUIRE(have_gpu());
  Ctx ctx;
  std::mt19937_64 rng(3);
  for (auto lengths : std::vector<std::vector<int64_t>>{{1}, {5, 0, 3}, {70, 1, 129}}) {
    const int64_t C = 96, K = 4, S = static_cast<int64_t>(lengths.size());
    const auto off = offsets_of(lengths);
    const int64_t T = off.back();
    auto x = random_bf16(rng, T * C), dy = random_bf16(rng, T * C);
    auto w = random_floats(rng, C * K, -0.5, 0.5, false);
    std::vector<std::vector<float>> caches;
    std::vector<float*> cache_ptrs;
    std::vector<DeviceVec<bf16>> gcaches;
    std::vector<bf16*> gcache_ptrs;
    for (int64_t s = 0; s < S; ++s) {
      caches.push_back(random_floats(rng, (K - 1) * C, -1, 1, true));
      gcaches.emplace_back(to_bf16(caches.back()));
    }
    for (int64_t s = 0; s < S; ++s) {
      cache_ptrs.push_back(s == 1 ? nullptr : caches[s].data());  // one sequence starts from zeros
      gcache_ptrs.push_back(s == 1 ? nullptr : gcaches[s].get());
    }
    std::vector<float> y(T * C);
    cpu::causal_conv_silu_forward<float>(C, K, off.data(), S, x.host.data(), w.data(), cache_ptrs.data(), true,
                                         y.data());
    DeviceVec<int64_t> goff(off);
    DeviceVec<float> gw(w);
    DeviceVec<bf16*> gptrs(gcache_ptrs);
    DeviceVec<bf16> gy(T * C);
    gpu::causal_conv_silu_forward(ctx, C, K, goff.get(), S, T, x.get(), gw.get(), gptrs.get(), true, gy.get());
    CHECK_CLOSE(gy.download(), y, 1e-2);
    for (int64_t s = 0; s < S; ++s)
      if (s != 1) CHECK_CLOSE(gcaches[s].download(), caches[s], 1e-6);  // raw inputs moved, exactly

    std::vector<float> dx(T * C), dw = zeros(C * K);
    cpu::causal_conv_silu_backward<float>(C, K, off.data(), S, x.host.data(), w.data(), dy.host.data(), dx.data(),
                                          dw.data());
    DeviceVec<bf16> gdx(T * C);
    DeviceVec<float> gdw(C * K);
    gpu::causal_conv_silu_backward(ctx, C, K, goff.get(), S, T, x.get(), gw.get(), dy.get(), gdx.get(), gdw.get());
    CHECK_CLOSE(gdx.download(), dx, 1e-2);
    CHECK_CLOSE(gdw.download(), dw, 1e-2);
  }
}

TEST_CASE("rope: partial NeoX rotation and its adjoint at large positions") {
  REQUIRE(have_gpu());
  Ctx ctx;
  std::mt19937_64 rng(4);
  const int64_t rows = 9, heads = 3, D = 256, rd = 64;
  std::vector<int64_t> pos{0, 1, 2, 17, 1000, 4095, 65535, 131071, 262143};
  auto x = random_bf16(rng, rows * heads * D);
  std::vector<float> y = x.host, dy = x.host;
  cpu::rope_forward<float>(rows, heads, D, rd, 1e7, pos.data(), y.data());
  cpu::rope_backward<float>(rows, heads, D, rd, 1e7, pos.data(), dy.data());
  DeviceVec<int64_t> gpos(pos);
  DeviceVec<bf16> gy(to_bf16(x.host)), gdy(to_bf16(x.host));
  gpu::rope_forward(ctx, rows, heads, D, rd, 1e7, gpos.get(), gy.get());
  gpu::rope_backward(ctx, rows, heads, D, rd, 1e7, gpos.get(), gdy.get());
  CHECK_CLOSE(gy.download(), y, 1e-2);
  CHECK_CLOSE(gdy.download(), dy, 1e-2);
}

TEST_CASE("linear: cuBLAS forward, input and weight gradients, grouped form") {
  REQUIRE(have_gpu());
  Ctx ctx;
  std::mt19937_64 rng(5);
  for (auto [M, N, K] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{{1, 8, 16}, {37, 96, 64}, {130, 300, 512}}) {
    INFO("M " << M << " N " << N << " K " << K);
    auto x = random_bf16(rng, M * K), W = random_bf16(rng, N * K), dy = random_bf16(rng, M * N);
    std::vector<float> y(M * N), dx(M * K), dW = zeros(N * K);
    cpu::linear_forward<float>(M, N, K, x.host.data(), W.host.data(), y.data());
    cpu::linear_backward_input<float>(M, N, K, dy.host.data(), W.host.data(), dx.data(), false);
    cpu::linear_backward_weight<float>(M, N, K, dy.host.data(), x.host.data(), dW.data());
    DeviceVec<bf16> gy(M * N), gdx(M * K);
    DeviceVec<float> gdW(N * K);
    gpu::linear_forward(ctx, M, N, K, x.get(), W.get(), gy.get());
    gpu::linear_backward_input(ctx, M, N, K, dy.get(), W.get(), gdx.get(), false);
    gpu::linear_backward_weight(ctx, M, N, K, dy.get(), x.get(), gdW.get());
    CHECK_CLOSE(gy.download(), y, 1e-2);
    CHECK_CLOSE(gdx.download(), dx, 1e-2);
    CHECK_CLOSE(gdW.download(), dW, 1e-5);  // fp32 output, fp32 accumulation

    // Grouped: the rows split into three groups (one empty) against the same weight.
    DeviceVec<bf16> gyg(M * N);
    const int64_t m0 = M / 3, m1 = 0, m2 = M - m0;
    gpu::linear_grouped(ctx, gpu::LinearKind::forward,
                        {{m0, N, K, x.get(), W.get(), gyg.get()},
                         {m1, N, K, x.get() + m0 * K, W.get(), gyg.get() + m0 * N},
                         {m2, N, K, x.get() + m0 * K, W.get(), gyg.get() + m0 * N}});
    CHECK_CLOSE(gyg.download(), y, 1e-2);
  }
}

TEST_CASE("gdn: recurrent and chunked forward with states, and the backward, match the CPU backend") {
  REQUIRE(have_gpu());
  Ctx ctx;
  std::mt19937_64 rng(6);
  struct Case { gpu::GdnShape shape; std::vector<int64_t> lengths; };
  for (const Case& c : std::vector<Case>{{{1, 1, 16, 8}, {1}}, {{2, 4, 32, 48}, {65, 0, 7}},
                                         {{1, 2, 128, 128}, {130, 64}}}) {
    const auto& s = c.shape;
    const auto off = offsets_of(c.lengths);
    const int64_t T = off.back(), S = static_cast<int64_t>(c.lengths.size());
    const int64_t Hk = s.num_key_heads, Hv = s.num_value_heads, dk = s.key_dim, dv = s.value_dim;
    INFO("Hk " << Hk << " Hv " << Hv << " dk " << dk << " dv " << dv << " T " << T);
    // Normalised q, k as the model feeds them (unit rows; q scaled).
    auto unit_rows = [&](double scale) {
      auto v = random_floats(rng, T * Hk * dk, -1, 1, false);
      for (int64_t r = 0; r < T * Hk; ++r) {
        double ss = 0;
        for (int64_t i = 0; i < dk; ++i) ss += double(v[r * dk + i]) * v[r * dk + i];
        for (int64_t i = 0; i < dk; ++i) v[r * dk + i] = float(v[r * dk + i] / std::sqrt(ss) * scale);
      }
      return v;
    };
    auto q = unit_rows(1 / std::sqrt(double(dk))), k = unit_rows(1);
    auto v = random_bf16(rng, T * Hv * dv);
    auto g = random_floats(rng, T * Hv, -2, -0.01, false), beta = random_floats(rng, T * Hv, 0.05, 0.95, false);
    auto init = random_floats(rng, S * Hv * dk * dv, -0.5, 0.5, false);
    const cpu::GdnShape cs{Hk, Hv, dk, dv};
    DeviceVec<int64_t> goff(off);
    DeviceVec<float> gq(q), gk(k), gg(g), gb(beta);
    for (bool chunked : {false, true}) {
      INFO((chunked ? "chunked" : "recurrent"));
      // The CPU takes one initial state for all sequences of a batch: run it sequence by sequence.
      std::vector<float> out_s(T * Hv * dv), fin_s(init.size());
      for (int64_t sq = 0; sq < S; ++sq) {
        const int64_t seg[2] = {0, c.lengths[sq]}, b = off[sq];
        (chunked ? cpu::gdn_chunked_forward<float> : cpu::gdn_recurrent_forward<float>)(
            cs, seg, 1, q.data() + b * Hk * dk, k.data() + b * Hk * dk, v.host.data() + b * Hv * dv,
            g.data() + b * Hv, beta.data() + b * Hv, init.data() + sq * Hv * dk * dv, out_s.data() + b * Hv * dv,
            fin_s.data() + sq * Hv * dk * dv);
      }
      std::vector<DeviceVec<float>> states;
      std::vector<float*> ptrs;
      for (int64_t sq = 0; sq < S; ++sq) {
        states.emplace_back(std::vector<float>(init.begin() + sq * Hv * dk * dv, init.begin() + (sq + 1) * Hv * dk * dv));
        ptrs.push_back(states.back().get());
      }
      DeviceVec<float*> gptrs(ptrs);
      DeviceVec<bf16> gout(T * Hv * dv);
      (chunked ? gpu::gdn_chunked_forward : gpu::gdn_recurrent_forward)(
          ctx, s, goff.get(), S, gq.get(), gk.get(), v.get(), gg.get(), gb.get(), gptrs.get(), gout.get());
      CHECK_CLOSE(gout.download(), out_s, 1e-2);
      for (int64_t sq = 0; sq < S; ++sq) {
        std::vector<float> ref(fin_s.begin() + sq * Hv * dk * dv, fin_s.begin() + (sq + 1) * Hv * dk * dv);
        CHECK_CLOSE(states[sq].download(), ref, 1e-2);
      }
      // Zero states (training): no state array.
      std::vector<float> out0(T * Hv * dv);
      (chunked ? cpu::gdn_chunked_forward<float> : cpu::gdn_recurrent_forward<float>)(
          cs, off.data(), S, q.data(), k.data(), v.host.data(), g.data(), beta.data(), nullptr, out0.data(), nullptr);
      (chunked ? gpu::gdn_chunked_forward : gpu::gdn_recurrent_forward)(
          ctx, s, goff.get(), S, gq.get(), gk.get(), v.get(), gg.get(), gb.get(), nullptr, gout.get());
      CHECK_CLOSE(gout.download(), out0, 1e-2);
    }
    auto dout = random_bf16(rng, T * Hv * dv);
    std::vector<float> dq(q.size()), dk_(k.size()), dv_(T * Hv * dv), dg(g.size()), db(beta.size());
    cpu::gdn_backward<float>(cs, off.data(), S, q.data(), k.data(), v.host.data(), g.data(), beta.data(), nullptr,
                             dout.host.data(), nullptr, dq.data(), dk_.data(), dv_.data(), dg.data(), db.data(),
                             nullptr);
    DeviceVec<float> gdq(q.size()), gdk(k.size()), gdg(g.size()), gdb(beta.size());
    DeviceVec<bf16> gdv(T * Hv * dv);
    gpu::DeviceBuffer scratch;
    gpu::gdn_backward(ctx, s, goff.get(), off.data(), S, gq.get(), gk.get(), v.get(), gg.get(), gb.get(), dout.get(),
                      gdq.get(), gdk.get(), gdv.get(), gdg.get(), gdb.get(), scratch);
    CHECK_CLOSE(gdq.download(), dq, 2e-2);
    CHECK_CLOSE(gdk.download(), dk_, 2e-2);
    CHECK_CLOSE(gdv.download(), dv_, 2e-2);
    CHECK_CLOSE(gdg.download(), dg, 2e-2);
    CHECK_CLOSE(gdb.download(), db, 2e-2);
  }
}

TEST_CASE("attention: flash-style forward (contiguous and paged KV) and backward match the CPU backend") {
  REQUIRE(have_gpu());
  Ctx ctx;
  std::mt19937_64 rng(7);
  struct Case { gpu::AttentionShape shape; std::vector<int64_t> q_len, kv_len; };
  for (const Case& c : std::vector<Case>{{{1, 1, 8}, {1}, {1}},
                                         {{4, 2, 64}, {5, 33, 1}, {5, 33, 40}},
                                         {{8, 2, 256}, {70, 1}, {70, 300}}}) {
    const auto& s = c.shape;
    const auto qo = offsets_of(c.q_len), ko = offsets_of(c.kv_len);
    const int64_t S = static_cast<int64_t>(c.q_len.size()), Tq = qo.back(), Tk = ko.back();
    const int64_t H = s.num_heads, Hkv = s.num_kv_heads, D = s.head_dim;
    INFO("H " << H << " Hkv " << Hkv << " D " << D << " Tq " << Tq << " Tkv " << Tk);
    auto q = random_bf16(rng, Tq * H * D, -2, 2), k = random_bf16(rng, Tk * Hkv * D, -2, 2);
    auto v = random_bf16(rng, Tk * Hkv * D), dout = random_bf16(rng, Tq * H * D);
    const cpu::AttentionShape cs{H, Hkv, D};
    std::vector<float> out(Tq * H * D), dq(q.host.size()), dk(k.host.size()), dv(v.host.size());
    cpu::attention_forward<float>(cs, qo.data(), ko.data(), S, q.host.data(), k.host.data(), v.host.data(), out.data());
    DeviceVec<int64_t> gqo(qo), gko(ko);
    DeviceVec<bf16> gout(Tq * H * D);
    DeviceVec<float> lse(Tq * H);
    gpu::attention_forward(ctx, s, gqo.get(), gko.get(), S, Tq, q.get(), k.get(), v.get(), gout.get(), lse.get());
    CHECK_CLOSE(gout.download(), out, 1e-2);

    // The same through a paged cache with blocks of 16, handed out in reverse order.
    const int64_t bs = 16;
    int64_t max_blocks = 0;
    for (int64_t l : c.kv_len) max_blocks = std::max(max_blocks, (l + bs - 1) / bs);
    const int64_t nblocks = S * max_blocks;
    std::vector<int32_t> table(S * max_blocks);
    for (int64_t i = 0; i < nblocks; ++i) table[i] = static_cast<int32_t>(nblocks - 1 - i);
    DeviceVec<int32_t> gtable(table);
    DeviceVec<bf16> kpool(nblocks * bs * Hkv * D), vpool(nblocks * bs * Hkv * D);
    // Fill the pools with every kv token: q_offsets = kv offsets, lengths = kv lengths.
    DeviceVec<int64_t> glen(std::vector<int64_t>(c.kv_len));
    gpu::paged_kv_write(ctx, s, gko.get(), glen.get(), S, Tk, k.get(), v.get(), kpool.get(), vpool.get(),
                        gtable.get(), max_blocks, bs);
    DeviceVec<bf16> gpout(Tq * H * D);
    gpu::attention_forward_paged(ctx, s, gqo.get(), glen.get(), S, Tq, q.get(), kpool.get(), vpool.get(),
                                 gtable.get(), max_blocks, bs, gpout.get());
    CHECK_CLOSE(gpout.download(), out, 1e-2);

    cpu::attention_backward<float>(cs, qo.data(), ko.data(), S, q.host.data(), k.host.data(), v.host.data(),
                                   dout.host.data(), dq.data(), dk.data(), dv.data());
    DeviceVec<bf16> gdq(dq.size()), gdk(dk.size()), gdv(dv.size());
    gpu::DeviceBuffer scratch;
    gpu::attention_backward(ctx, s, gqo.get(), gko.get(), S, Tq, Tk, q.get(), k.get(), v.get(), gout.get(), lse.get(),
                            dout.get(), gdq.get(), gdk.get(), gdv.get(), scratch);
    CHECK_CLOSE(gdq.download(), dq, 3e-2);
    CHECK_CLOSE(gdk.download(), dk, 3e-2);
    CHECK_CLOSE(gdv.download(), dv, 3e-2);
  }
}

TEST_CASE("moe: router top-k and replay, router backward, grouped experts forward and backward") {
  REQUIRE(have_gpu());
  Ctx ctx;
  std::mt19937_64 rng(8);
  for (auto [rows, E, k, H, I] : std::vector<std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t>>{
           {1, 4, 2, 16, 8}, {37, 16, 4, 64, 32}, {200, 512, 10, 128, 64}}) {
    INFO("rows " << rows << " E " << E << " k " << k);
    for (bool norm : {true, false}) {
      const cpu::MoeShape cs{H, E, k, I, norm};
      const gpu::MoeShape gs{H, E, k, I, norm};
      auto logits = random_floats(rng, rows * E, -3, 3, false);
      std::vector<int16_t> ex(rows * k);
      std::vector<float> w(rows * k);
      REQUIRE(cpu::route<float>(cs, rows, logits.data(), nullptr, ex.data(), w.data()));
      DeviceVec<float> gl(logits), gw(rows * k);
      DeviceVec<int16_t> gex(rows * k);
      DeviceVec<int> bad(1);
      gpu::route(ctx, gs, rows, gl.get(), nullptr, gex.get(), gw.get(), bad.get());
      CHECK(gex.download() == ex);
      CHECK_CLOSE(gw.download(), w, 1e-5);

      // Replay of a shuffled record: experts taken as given, weights from the logits.
      std::vector<int16_t> replay = ex;
      for (int64_t r = 0; r < rows; ++r) std::reverse(replay.begin() + r * k, replay.begin() + (r + 1) * k);
      std::vector<int16_t> rex(rows * k);
      std::vector<float> rw(rows * k);
      REQUIRE(cpu::route<float>(cs, rows, logits.data(), replay.data(), rex.data(), rw.data()));
      DeviceVec<int16_t> greplay(replay), grex(rows * k);
      gpu::route(ctx, gs, rows, gl.get(), greplay.get(), grex.get(), gw.get(), bad.get());
      CHECK(grex.download() == replay);
      CHECK_CLOSE(gw.download(), rw, 1e-5);
      CHECK(bad.download()[0] == 0);
      std::vector<int16_t> wrong = replay;
      wrong[0] = static_cast<int16_t>(E);
      DeviceVec<int16_t> gwrong(wrong);
      gpu::route(ctx, gs, rows, gl.get(), gwrong.get(), grex.get(), gw.get(), bad.get());
      CHECK(bad.download()[0] == 1);  // an out-of-range replayed id is reported, not used

      auto dw = random_floats(rng, rows * k, -1, 1, false);
      std::vector<float> dl(rows * E);
      cpu::route_backward<float>(cs, rows, logits.data(), ex.data(), w.data(), dw.data(), dl.data());
      DeviceVec<float> gdw(dw), gdl(rows * E), gw2(w);
      gpu::route_backward(ctx, gs, rows, gl.get(), gex.get(), gw2.get(), gdw.get(), gdl.get());
      CHECK_CLOSE(gdl.download(), dl, 1e-5);

      if (!norm) continue;
      auto x = random_bf16(rng, rows * H), gu = random_bf16(rng, E * 2 * I * H, -0.2, 0.2);
      auto down = random_bf16(rng, E * H * I, -0.2, 0.2), dy = random_bf16(rng, rows * H);
      std::vector<float> y = zeros(rows * H), dx = zeros(rows * H), dwe(rows * k), dgu = zeros(gu.host.size()),
                         ddown = zeros(down.host.size());
      cpu::experts_forward<float>(cs, rows, x.host.data(), ex.data(), w.data(), gu.host.data(), down.host.data(),
                                  y.data());
      cpu::experts_backward<float>(cs, rows, x.host.data(), ex.data(), w.data(), gu.host.data(), down.host.data(),
                                   dy.host.data(), dx.data(), dwe.data(), dgu.data(), ddown.data());
      DeviceVec<bf16> gy(rows * H), gdx(rows * H);
      DeviceVec<float> gdwe(rows * k), gdgu(dgu.size()), gddown(ddown.size());
      gpu::DeviceBuffer scratch;
      gpu::experts_forward(ctx, gs, rows, x.get(), gex.get(), gw2.get(), gu.get(), down.get(), gy.get(), scratch);
      gpu::experts_backward(ctx, gs, rows, x.get(), gex.get(), gw2.get(), gu.get(), down.get(), dy.get(), gdx.get(),
                            false, gdwe.get(), gdgu.get(), gddown.get(), scratch);
      CHECK_CLOSE(gy.download(), y, 3e-2);
      CHECK_CLOSE(gdx.download(), dx, 3e-2);
      CHECK_CLOSE(gdwe.download(), dwe, 3e-2);
      CHECK_CLOSE(gdgu.download(), dgu, 3e-2);
      CHECK_CLOSE(gddown.download(), ddown, 3e-2);
    }
  }
}

TEST_CASE("embedding and output head: gather, scatter-add, logits, logprobs and their gradient") {
  REQUIRE(have_gpu());
  Ctx ctx;
  std::mt19937_64 rng(9);
  const int64_t V = 1000, valid = 990, H = 64, rows = 23;
  auto E = random_bf16(rng, V * H), Wlm = random_bf16(rng, V * H), dx = random_bf16(rng, rows * H);
  std::vector<int32_t> ids(rows);
  for (auto& i : ids) i = static_cast<int32_t>(rng() % valid);
  ids[3] = ids[7];  // a repeated id sums its gradients
  DeviceVec<int32_t> gids(ids);
  DeviceVec<bf16> gx(rows * H);
  DeviceVec<float> gdE(V * H);
  gpu::embedding_forward(ctx, rows, H, gids.get(), E.get(), gx.get());
  gpu::embedding_backward(ctx, rows, H, gids.get(), dx.get(), gdE.get());
  std::vector<float> x(rows * H), dE = zeros(V * H);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < H; ++i) {
      x[r * H + i] = E.host[ids[r] * H + i];
      dE[ids[r] * H + i] += dx.host[r * H + i];
    }
  CHECK_CLOSE(gx.download(), x, 1e-6);  // a copy
  CHECK_CLOSE(gdE.download(), dE, 1e-6);

  std::vector<float> logits(rows * V);
  cpu::linear_forward<float>(rows, V, H, x.data(), Wlm.host.data(), logits.data());
  DeviceVec<float> glogits(rows * V), glp(rows), glse(rows);
  gpu::logits_forward(ctx, rows, V, H, gx.get(), Wlm.get(), glogits.get());
  CHECK_CLOSE(glogits.download(), logits, 1e-5);
  std::vector<int32_t> targets(rows);
  for (auto& t : targets) t = static_cast<int32_t>(rng() % valid);
  DeviceVec<int32_t> gt(targets);
  DeviceVec<float> exact(logits);  // the CPU's logits, so the logprob check isolates the reduction
  gpu::token_logprobs(ctx, rows, V, valid, exact.get(), gt.get(), glp.get(), glse.get());
  const auto lp = glp.download();
  for (int64_t r = 0; r < rows; ++r)
    CHECK(std::fabs(lp[r] - mlpt::ref::token_logprob<float>(logits.data() + r * V, valid, targets[r])) < 1e-4);

  auto coef = random_floats(rng, rows, -1, 1, false);
  coef[2] = 0;
  DeviceVec<float> gcoef(coef);
  DeviceVec<bf16> gdl(rows * V);
  gpu::token_logprobs_backward(ctx, rows, V, valid, exact.get(), glse.get(), gt.get(), gcoef.get(), gdl.get());
  std::vector<float> dl = zeros(rows * V);
  for (int64_t r = 0; r < rows; ++r) {
    double mx = -INFINITY, z = 0;
    for (int64_t i = 0; i < valid; ++i) mx = std::max(mx, double(logits[r * V + i]));
    for (int64_t i = 0; i < valid; ++i) z += std::exp(logits[r * V + i] - mx);
    for (int64_t i = 0; i < valid; ++i)
      dl[r * V + i] = float(coef[r] * ((i == targets[r]) - std::exp(logits[r * V + i] - mx) / z));
  }
  CHECK_CLOSE(gdl.download(), dl, 1e-2);
}

// The vocabulary-parallel head (device_model/vocab_head.hpp) as the CUDA kernels run it, each of
// four ranges of 1001 ids (700 real: the last range padding only) against the CPU backend's ops (the
// oracle the CPU tests hold to one rank), and the combined row against one rank's token_logprobs.
TEST_CASE("vocabulary-parallel head: range stats, their combination and the range's gradient as the CPU's") {
  REQUIRE(have_gpu());
  Ctx ctx;
  mlpt::ref::cpu::Bf16Ops oracle;
  std::mt19937_64 rng(11);
  const int64_t V = 1001, valid = 700, rows = 19, tp = 4, H = 16;
  const auto logits = random_floats(rng, rows * V, -6, 6, false);
  std::vector<int32_t> targets(rows);
  for (auto& t : targets) t = static_cast<int32_t>(rng() % valid);
  auto coef = random_floats(rng, rows, -1, 1, false);
  coef[4] = 0;
  DeviceVec<float> gall(logits), glp1(rows), glse1(rows);
  DeviceVec<int32_t> gt1(targets);
  gpu::token_logprobs(ctx, rows, V, valid, gall.get(), gt1.get(), glp1.get(), glse1.get());
  std::vector<float> stats, cpu_stats;  // [tp, rows, 4]
  std::vector<std::vector<float>> slices;
  std::vector<std::vector<int32_t>> local;
  for (int r = 0; r < tp; ++r) {
    const mlpt::ref::VocabRange range = mlpt::ref::vocab_range(V, int(tp), r);
    const int64_t n = range.count(), mine = std::clamp<int64_t>(valid - range.begin, 0, n);
    std::vector<float> slice(rows * n);
    for (int64_t i = 0; i < rows; ++i)
      std::copy_n(logits.begin() + i * V + range.begin, n, slice.begin() + i * n);
    local.push_back(mlpt::ref::dev::vocab_local_ids(range, targets));
    DeviceVec<float> gslice(slice), gstats(rows * 4);
    DeviceVec<int32_t> gt(local.back());
    gpu::vocab_logprob_stats(ctx, rows, n, mine, gslice.get(), gt.get(), gstats.get());
    const auto got = gstats.download();
    std::vector<float> want(rows * 4);
    oracle.vocab_logprob_stats(rows, n, mine, slice.data(), local.back().data(), want.data());
    for (int64_t i = 0; i < rows * 4; ++i) {
      INFO("rank " << r << " row " << i / 4 << " stat " << i % 4);
      if (i % 4 == 1)  // Σ exp: fp32 sums in another order
        CHECK(std::fabs(got[i] - want[i]) <= 1e-5 * std::fabs(want[i]));
      else  // the max, the target's logit and whether the range holds it: exact
        CHECK(got[i] == want[i]);
    }
    stats.insert(stats.end(), got.begin(), got.end());
    cpu_stats.insert(cpu_stats.end(), want.begin(), want.end());
    slices.push_back(std::move(slice));
  }
  DeviceVec<float> gstats(stats), glp(rows), glse(rows);
  gpu::vocab_logprob_combine(ctx, rows, tp, gstats.get(), glp.get(), glse.get());
  std::vector<float> lp(rows), lse(rows);
  oracle.vocab_logprob_combine(rows, tp, cpu_stats.data(), lp.data(), lse.data());
  const auto glp_h = glp.download(), glse_h = glse.download(), lp1 = glp1.download();
  for (int64_t i = 0; i < rows; ++i) {
    CHECK(std::fabs(glp_h[i] - lp[i]) < 1e-5);
    CHECK(std::fabs(glse_h[i] - lse[i]) < 1e-5);
    CHECK(std::fabs(glp_h[i] - lp1[i]) < 1e-4);  // one rank's, over the whole row
  }
  // Each range's gradient from the combined lse: targets outside it add no onehot.
  DeviceVec<float> gcoef(coef);
  for (int r = 0; r < tp; ++r) {
    const mlpt::ref::VocabRange range = mlpt::ref::vocab_range(V, int(tp), r);
    const int64_t n = range.count(), mine = std::clamp<int64_t>(valid - range.begin, 0, n);
    DeviceVec<float> gslice(slices[r]);
    DeviceVec<int32_t> gt(local[r]);
    DeviceVec<bf16> gdl(rows * n);
    gpu::token_logprobs_backward(ctx, rows, n, mine, gslice.get(), glse.get(), gt.get(), gcoef.get(), gdl.get());
    std::vector<mlpt::ref::bf16> want(rows * n);
    oracle.token_logprobs_backward(rows, n, mine, slices[r].data(), glse_h.data(), local[r].data(), coef.data(),
                                   want.data());
    std::vector<float> want_f(rows * n);
    for (int64_t i = 0; i < rows * n; ++i) want_f[i] = mlpt::ref::to_float(want[i]);
    INFO("rank " << r);
    CHECK_CLOSE(gdl.download(), want_f, 1e-2);
  }
  // Ids outside a rank's range (−1): zero embedding rows and no gradient.
  auto E = random_bf16(rng, 5 * H), dx = random_bf16(rng, 3 * H);
  DeviceVec<int32_t> ids(std::vector<int32_t>{2, -1, 4});
  DeviceVec<bf16> gx(3 * H);
  DeviceVec<float> gdE(5 * H);
  gpu::embedding_forward(ctx, 3, H, ids.get(), E.get(), gx.get());
  gpu::embedding_backward(ctx, 3, H, ids.get(), dx.get(), gdE.get());
  std::vector<float> x = zeros(3 * H), dE = zeros(5 * H);
  for (int64_t i = 0; i < H; ++i) {
    x[i] = E.host[2 * H + i], x[2 * H + i] = E.host[4 * H + i];
    dE[2 * H + i] = dx.host[i], dE[4 * H + i] = dx.host[2 * H + i];
  }
  CHECK_CLOSE(gx.download(), x, 1e-6);
  CHECK_CLOSE(gdE.download(), dE, 1e-6);
}

TEST_CASE("sampling on the device: the CPU sampler's ids and logprobs, with and without top-p") {
  REQUIRE(have_gpu());
  Ctx ctx;
  std::mt19937_64 rng(10);
  const int64_t V = 5000, valid = 4990, rows = 64;
  auto logits = random_floats(rng, rows * V, -4, 4, false);
  // The last 16 rows in steps of 0.5: hundreds of ids share each probability (ties walk in id order).
  for (int64_t i = (rows - 16) * V; i < rows * V; ++i) logits[i] = std::round(logits[i] * 2) / 2;
  DeviceVec<float> gl(logits);
  for (float top_p : {1.0f, 0.9f, 0.3f}) {
    INFO("top_p " << top_p);
    std::vector<gpu::SamplingRow> params(rows);
    for (int64_t r = 0; r < rows; ++r) params[r] = {r % 2 ? 0.7f : 1.0f, top_p, 1234u + uint64_t(r), uint64_t(r * 7)};
    DeviceVec<gpu::SamplingRow> gp(params);
    DeviceVec<int32_t> gtok(rows);
    DeviceVec<float> glp(rows);
    gpu::sample_tokens(ctx, rows, V, valid, gl.get(), gp.get(), gtok.get(), glp.get());
    const auto tok = gtok.download();
    const auto lp = glp.download();
    for (int64_t r = 0; r < rows; ++r) {
      INFO("row " << r);
      const float* l = logits.data() + r * V;
      mlpt::ref::SamplingParams sp;
      sp.temperature = params[r].temperature;
      sp.top_p = top_p;
      sp.seed = params[r].seed;
      REQUIRE(tok[r] >= 0);
      REQUIRE(tok[r] < valid);
      // The same walk (id order; most likely first with top-p): the same id from the same draw.
      const auto ref = mlpt::ref::sample_token(l, valid, sp, params[r].counter);
      CHECK(tok[r] == ref.token);
      CHECK(std::fabs(lp[r] - ref.logprob) < 1e-4);
      if (top_p < 1.0f) {  // in the top-p set: the mass of strictly more likely ids is below top_p
        double mx = -INFINITY, z = 0, above = 0;
        for (int64_t i = 0; i < valid; ++i) mx = std::max(mx, double(l[i]) / sp.temperature);
        for (int64_t i = 0; i < valid; ++i) z += std::exp(double(l[i]) / sp.temperature - mx);
        const double pt = std::exp(double(l[tok[r]]) / sp.temperature - mx) / z;
        for (int64_t i = 0; i < valid; ++i) {
          const double pi = std::exp(double(l[i]) / sp.temperature - mx) / z;
          if (pi > pt) above += pi;
        }
        CHECK(above < top_p + 1e-5);
        CHECK(lp[r] >= std::log(pt) - 1e-4);  // renormalised over a set of mass <= 1
      }
    }
  }
}

// The conversions that mark what they changed: the values to_bf16 / a copy write on this GPU, and
// marks that are exactly the elements whose bits differ before and after (independent of the
// kernel's ballot: tests/support/change_marks.hpp), ORed over two writes into words already set,
// nothing past the last element's word touched. The GPU's NaN conversion may differ from the CPU's
// (payloads), which is why the reference is the GPU's own before and after.
TEST_CASE("elementwise: to_bf16_marking and copy_marking mark exactly the elements whose bits changed") {
  REQUIRE(have_gpu());
  Ctx ctx;
  constexpr uint32_t kGuard = 0xa5a5a5a5u;
  auto check_op = [&](int64_t n, const auto& first, const auto& second, auto mark, auto plain) {
    using T = typename std::decay_t<decltype(first.before)>::value_type;
    std::vector<uint32_t> prior(change_marks::words(n), 0);
    prior[0] = 1u;  // a mark from before stays
    std::vector<uint32_t> words_host = prior;
    words_host.push_back(kGuard);
    DeviceVec<uint32_t> words(words_host);
    DeviceVec<T> y(first.before), want(first.before);
    DeviceVec<float> x1(first.x), x2(second.x);
    mark(n, x1.get(), y.get(), words.get());
    plain(n, x1.get(), want.get());
    const std::vector<T> after_first = y.download(), want_first = want.download();
    for (int64_t i = 0; i < n; ++i)
      REQUIRE(change_marks::bits_of(after_first[i]) == change_marks::bits_of(want_first[i]));
    mark(n, x2.get(), y.get(), words.get());
    std::vector<uint32_t> got = words.download();
    CHECK(got.back() == kGuard);
    got.pop_back();
    const auto expect = change_marks::expected(after_first, y.download(),
                                               change_marks::expected(first.before, after_first, prior));
    CHECK(got == expect);
    if (n % 32) CHECK((got.back() >> (n % 32)) == 0);
  };
  for (int64_t n : {1, 31, 32, 33, 65, 1001, 100003}) {
    INFO("n " << n);
    using Stored = mlpt::ref::bf16;  // the bits the CUDA kernels store as __nv_bfloat16
    auto as_gpu = [](Stored* p) { return reinterpret_cast<gpu::bf16*>(p); };
    const auto b1 = change_marks::bf16_case(n, 1), b2 = change_marks::bf16_case(n, 2);
    check_op(
        n, b1, b2,
        [&](int64_t k, const float* x, Stored* y, uint32_t* w) {
          gpu::to_bf16_marking(ctx, k, x, as_gpu(y), w);
        },
        [&](int64_t k, const float* x, Stored* y) { gpu::to_bf16(ctx, k, x, as_gpu(y)); });
    const auto f1 = change_marks::fp32_case(n, 3), f2 = change_marks::fp32_case(n, 4);
    check_op(
        n, f1, f2,
        [&](int64_t k, const float* x, float* y, uint32_t* w) { gpu::copy_marking(ctx, k, x, y, w); },
        [&](int64_t k, const float* x, float* y) {
          check(cudaMemcpy(y, x, size_t(k) * 4, cudaMemcpyDeviceToDevice), "test: copy");
        });
  }
}

TEST_CASE("optimizer: GRPO token loss, gradient norm and AdamW against the double references") {
  REQUIRE(have_gpu());
  Ctx ctx;
  std::mt19937_64 rng(11);
  const int64_t n = 10007;
  auto pw = random_floats(rng, n, -0.01, 0.01, false), lt = random_floats(rng, n, -3, 0, false);
  auto lp = lt;
  for (auto& x : lp) x += static_cast<float>((rng() % 1000) / 1000.0 * 0.6 - 0.3);
  pw[5] = 0;
  DeviceVec<float> gpw(pw), glt(lt), glp(lp), gloss(n), gcoef(n);
  for (bool clip : {false, true}) {
    mlpt::ref::LossSettings ls;
    ls.ppo_clip = clip;
    gpu::grpo_token_loss(ctx, n, gpw.get(), glt.get(), glp.get(), clip, ls.clip_low, ls.clip_high, gloss.get(),
                         gcoef.get());
    std::vector<float> loss(n), coef(n);
    for (int64_t i = 0; i < n; ++i) {
      auto t = mlpt::ref::token_loss(pw[i], lt[i], lp[i], ls);
      loss[i] = float(t.loss), coef[i] = float(t.grad);
    }
    CHECK_CLOSE(gloss.download(), loss, 1e-5);
    CHECK_CLOSE(gcoef.download(), coef, 1e-5);
  }

  auto grad = random_floats(rng, n, -1, 1, false), p = random_floats(rng, n, -1, 1, false);
  auto m = random_floats(rng, n, -0.1, 0.1, false), v = random_floats(rng, n, 0, 0.1, false);
  DeviceVec<double> ss(1);
  DeviceVec<float> gg(grad), gpm(p), gm(m), gv(v);
  gpu::sum_squares(ctx, n, gg.get(), ss.get());
  double ref_ss = 0;
  for (float x : grad) ref_ss += double(x) * x;
  CHECK(std::fabs(ss.download()[0] - ref_ss) < 1e-5 * ref_ss);

  const gpu::AdamWStep st{1e-3, 0.9, 0.999, 1e-8, 0.01, 3, 0.5};
  DeviceVec<bf16> work(n);
  gpu::adamw_update(ctx, n, st, gg.get(), gpm.get(), gm.get(), gv.get(), work.get());
  std::vector<float> rp(n), rm(n), rv(n);
  const double c1 = 1 - std::pow(0.9, 3), c2 = 1 - std::pow(0.999, 3);
  for (int64_t i = 0; i < n; ++i) {
    const double gr = grad[i] * 0.5, mi = 0.9 * m[i] + 0.1 * gr, vi = 0.999 * v[i] + 0.001 * gr * gr;
    rm[i] = float(mi), rv[i] = float(vi);
    rp[i] = float(p[i] - 1e-3 * ((mi / c1) / (std::sqrt(vi / c2) + 1e-8) + 0.01 * p[i]));
  }
  CHECK_CLOSE(gpm.download(), rp, 1e-5);
  CHECK_CLOSE(gm.download(), rm, 1e-5);
  CHECK_CLOSE(gv.download(), rv, 1e-5);
  CHECK_CLOSE(work.download(), rp, 1e-2);
}
