// Every CPU backward op of the reference model against central finite differences in float64, and
// a few forward properties that pin the math (cache continuation, rotation, routing).
#include <catch2/catch.hpp>

#include "backends/cpu/activations.hpp"
#include "backends/cpu/conv.hpp"
#include "backends/cpu/linear.hpp"
#include "backends/cpu/moe.hpp"
#include "backends/cpu/norms.hpp"
#include "backends/cpu/rope.hpp"
#include "fd.hpp"

using namespace mlpt::ref::cpu;
using mlpt_test::check_gradient;
using mlpt_test::dot;
using mlpt_test::random_vector;
using V = std::vector<double>;

TEST_CASE("linear: forward matches a naive product, backward matches finite differences") {
  const int64_t M = 5, N = 7, K = 6;
  V x = random_vector(M * K, 1), W = random_vector(N * K, 2), c = random_vector(M * N, 3), y(M * N);
  linear_forward(M, N, K, x.data(), W.data(), y.data());
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double s = 0;
      for (int64_t k = 0; k < K; ++k) s += x[i * K + k] * W[j * K + k];
      CHECK(y[i * N + j] == Approx(s).epsilon(1e-12));
    }
  auto loss = [&] {
    V out(M * N);
    linear_forward(M, N, K, x.data(), W.data(), out.data());
    return dot(out, c);
  };
  V dx(M * K), dW(N * K, 0.0);
  linear_backward_input(M, N, K, c.data(), W.data(), dx.data(), false);
  linear_backward_weight(M, N, K, c.data(), x.data(), dW.data());
  check_gradient("dx", x, dx, loss);
  check_gradient("dW", W, dW, loss);
}

TEST_CASE("zero-centred RMSNorm backward") {
  const int64_t R = 3, D = 8;
  V x = random_vector(R * D, 4), w = random_vector(D, 5, 0.3), c = random_vector(R * D, 6);
  auto loss = [&] {
    V y(R * D);
    rmsnorm_forward(R, D, x.data(), w.data(), 1e-6, y.data());
    return dot(y, c);
  };
  V dx(R * D), dw(D, 0.0);
  rmsnorm_backward(R, D, x.data(), w.data(), 1e-6, c.data(), dx.data(), dw.data());
  check_gradient("dx", x, dx, loss);
  check_gradient("dw", w, dw, loss);
  // w = 0 is the identity scale: y = x / rms(x).
  V zero(D, 0.0), y(R * D);
  rmsnorm_forward(R, D, x.data(), zero.data(), 0.0, y.data());
  double ss = 0;
  for (int64_t i = 0; i < D; ++i) ss += y[i] * y[i];
  CHECK(ss / D == Approx(1.0));
}

TEST_CASE("gated RMSNorm (plain weight, SiLU gate) backward") {
  const int64_t R = 4, D = 6;
  V o = random_vector(R * D, 7), z = random_vector(R * D, 8), w = random_vector(D, 9), c = random_vector(R * D, 10);
  auto loss = [&] {
    V y(R * D);
    gated_rmsnorm_forward(R, D, o.data(), z.data(), w.data(), 1e-6, y.data());
    return dot(y, c);
  };
  V d_o(R * D), dz(R * D), dw(D, 0.0);
  gated_rmsnorm_backward(R, D, o.data(), z.data(), w.data(), 1e-6, c.data(), d_o.data(), dz.data(), dw.data());
  check_gradient("d_o", o, d_o, loss);
  check_gradient("dz", z, dz, loss);
  check_gradient("dw", w, dw, loss);
}

TEST_CASE("L2 norm with scale backward, strided rows") {
  const int64_t R = 3, D = 5, stride = 7;
  V x = random_vector(R * stride, 11), c = random_vector(R * D, 12);
  const double scale = 0.4;
  auto loss = [&] {
    V y(R * D);
    l2norm_forward(R, D, x.data(), stride, 1e-6, scale, y.data());
    return dot(y, c);
  };
  V dx(R * stride, 0.0);
  l2norm_backward(R, D, x.data(), stride, 1e-6, scale, c.data(), dx.data(), stride);
  check_gradient("dx", x, dx, loss);
  V y(R * D);
  l2norm_forward(R, D, x.data(), stride, 0.0, 1.0, y.data());
  double n = 0;
  for (int64_t i = 0; i < D; ++i) n += y[i] * y[i];
  CHECK(n == Approx(1.0));
}

TEST_CASE("GDN gates backward, on both sides of the softplus threshold") {
  const int64_t R = 3, Hv = 4;
  V a = random_vector(R * Hv, 13, 2.0), b = random_vector(R * Hv, 14), alog = random_vector(Hv, 15, 0.5),
    dt = random_vector(Hv, 16);
  a[1] = 25.0;  // above the threshold: softplus is the identity there
  V cg = random_vector(R * Hv, 17), cb = random_vector(R * Hv, 18);
  auto loss = [&] {
    V g(R * Hv), beta(R * Hv);
    gdn_gates_forward(R, Hv, a.data(), b.data(), alog.data(), dt.data(), g.data(), beta.data());
    return dot(g, cg) + dot(beta, cb);
  };
  V da(R * Hv), db(R * Hv), dalog(Hv, 0.0), ddt(Hv, 0.0);
  gdn_gates_backward(R, Hv, a.data(), b.data(), alog.data(), dt.data(), cg.data(), cb.data(), da.data(), db.data(),
                     dalog.data(), ddt.data());
  check_gradient("da", a, da, loss);
  check_gradient("db", b, db, loss);
  check_gradient("dA_log", alog, dalog, loss);
  check_gradient("ddt_bias", dt, ddt, loss);
  V g(R * Hv), beta(R * Hv);
  gdn_gates_forward(R, Hv, a.data(), b.data(), alog.data(), dt.data(), g.data(), beta.data());
  for (double v : g) CHECK(v <= 0.0);
}

TEST_CASE("sigmoid output gate and SwiGLU backward, strided") {
  const int64_t R = 3, D = 4;
  V o = random_vector(R * 2 * D, 19), c = random_vector(R * D, 20);
  auto loss = [&] {
    V y(R * D);
    sigmoid_gate_forward(R, D, o.data(), 2 * D, o.data() + D, 2 * D, y.data());
    return dot(y, c);
  };
  V d(R * 2 * D, 0.0);
  sigmoid_gate_backward(R, D, o.data(), 2 * D, o.data() + D, 2 * D, c.data(), d.data(), 2 * D, d.data() + D, 2 * D);
  check_gradient("d(o|gate)", o, d, loss);

  auto swiloss = [&] {
    V h(R * D);
    swiglu_forward(R, D, o.data(), o.data() + D, 2 * D, h.data());
    return dot(h, c);
  };
  V dgu(R * 2 * D, 0.0);
  swiglu_backward(R, D, o.data(), o.data() + D, 2 * D, c.data(), dgu.data(), dgu.data() + D, 2 * D);
  check_gradient("d(gate|up)", o, dgu, swiloss);
}

TEST_CASE("causal conv + SiLU: backward, sequence boundaries, and cache continuation") {
  const int64_t C = 5, K = 4;
  const std::vector<int64_t> offsets{0, 6, 8, 15};
  const int64_t T = offsets.back();
  V x = random_vector(T * C, 21), w = random_vector(C * K, 22), c = random_vector(T * C, 23);
  auto loss = [&] {
    V y(T * C);
    causal_conv_silu_forward<double>(C, K, offsets.data(), 3, x.data(), w.data(), nullptr, false, y.data());
    return dot(y, c);
  };
  V dx(T * C), dw(C * K, 0.0);
  causal_conv_silu_backward(C, K, offsets.data(), 3, x.data(), w.data(), c.data(), dx.data(), dw.data());
  check_gradient("dx", x, dx, loss);
  check_gradient("dw", w, dw, loss);

  // The window resets at boundaries: sequence 1 alone gives the same output as inside the batch.
  V y_all(T * C), y_one(2 * C);
  causal_conv_silu_forward<double>(C, K, offsets.data(), 3, x.data(), w.data(), nullptr, false, y_all.data());
  const int64_t one[2] = {0, 2};
  causal_conv_silu_forward<double>(C, K, one, 1, x.data() + 6 * C, w.data(), nullptr, false, y_one.data());
  for (int64_t i = 0; i < 2 * C; ++i) CHECK(y_one[i] == y_all[6 * C + i]);

  // Running a sequence in pieces through the cache (prefill 3, then 1, 1, 2) equals one pass.
  const int64_t seq[2] = {0, 7};
  V full(7 * C), pieces(7 * C), cache((K - 1) * C, 0.0);
  causal_conv_silu_forward<double>(C, K, seq, 1, x.data() + 8 * C, w.data(), nullptr, false, full.data());
  double* caches[1] = {cache.data()};
  int64_t at = 0;
  for (int64_t n : {3, 1, 1, 2}) {
    const int64_t o[2] = {0, n};
    causal_conv_silu_forward<double>(C, K, o, 1, x.data() + (8 + at) * C, w.data(), caches, true,
                                     pieces.data() + at * C);
    at += n;
  }
  for (int64_t i = 0; i < 7 * C; ++i) CHECK(pieces[i] == Approx(full[i]).epsilon(1e-14));

  // Starting from windows (a shared prefix's continuation): the gradient of each window too; a
  // 1-token sequence reads only window rows and sequence 0 none.
  const std::vector<int64_t> wo{0, 6, 7, 15};
  V w1 = random_vector((K - 1) * C, 24), w2 = random_vector((K - 1) * C, 25);
  const double* windows[3] = {nullptr, w1.data(), w2.data()};
  auto wloss = [&] {
    V y(T * C), c1 = w1, c2 = w2;
    double* ws[3] = {nullptr, c1.data(), c2.data()};
    causal_conv_silu_forward<double>(C, K, wo.data(), 3, x.data(), w.data(), ws, false, y.data());
    return dot(y, c);
  };
  V dxw(T * C), dww(C * K, 0.0), dw1((K - 1) * C), dw2((K - 1) * C);
  double* d_windows[3] = {nullptr, dw1.data(), dw2.data()};
  causal_conv_silu_backward(C, K, wo.data(), 3, x.data(), w.data(), c.data(), dxw.data(), dww.data(), windows,
                            d_windows);
  check_gradient("dx (windows)", x, dxw, wloss);
  check_gradient("dw (windows)", w, dww, wloss);
  check_gradient("d window 1", w1, dw1, wloss);
  check_gradient("d window 2", w2, dw2, wloss);
}

TEST_CASE("partial NeoX RoPE: rotation, pass-through dims, adjoint") {
  const int64_t R = 3, heads = 2, D = 8, rd = 4;
  const std::vector<int64_t> pos{0, 5, 1234};
  V x = random_vector(R * heads * D, 24), c = random_vector(R * heads * D, 25);
  V y = x;
  rope_forward(R, heads, D, rd, 1e7, pos.data(), y.data());
  for (int64_t i = 0; i < heads * D; ++i) CHECK(y[i] == x[i]);  // position 0 is the identity
  for (int64_t r = 0; r < R; ++r)
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t i = rd; i < D; ++i) CHECK(y[(r * heads + h) * D + i] == x[(r * heads + h) * D + i]);
  // Pair (0, rd/2) at position 5 rotates by angle 5 (inv_freq_0 = 1).
  double x1 = x[heads * D + 0], x2 = x[heads * D + rd / 2];
  CHECK(y[heads * D + 0] == Approx(x1 * std::cos(5.0) - x2 * std::sin(5.0)));
  CHECK(y[heads * D + rd / 2] == Approx(x2 * std::cos(5.0) + x1 * std::sin(5.0)));
  auto loss = [&] {
    V t = x;
    rope_forward(R, heads, D, rd, 1e7, pos.data(), t.data());
    return dot(t, c);
  };
  V d = c;
  rope_backward(R, heads, D, rd, 1e7, pos.data(), d.data());
  check_gradient("dx", x, d, loss);
}

TEST_CASE("router: top-k choice, renormalised weights, replay, and backward") {
  for (bool norm : {true, false}) {
    const MoeShape s{4, 6, 2, 3, norm};
    const int64_t R = 4;
    V logits = random_vector(R * s.num_experts, 26);
    std::vector<int16_t> ex(R * s.top_k);
    V w(R * s.top_k);
    REQUIRE(route(s, R, logits.data(), nullptr, ex.data(), w.data()));
    for (int64_t r = 0; r < R; ++r) {
      const double* l = logits.data() + r * s.num_experts;
      for (int64_t e = 0; e < s.num_experts; ++e)
        if (e != ex[r * 2] && e != ex[r * 2 + 1]) CHECK(l[e] <= l[ex[r * 2 + 1]]);
      CHECK(l[ex[r * 2]] >= l[ex[r * 2 + 1]]);
      if (norm) CHECK(w[r * 2] + w[r * 2 + 1] == Approx(1.0));
    }
    // Replay of other experts: weights from the logits restricted to the replayed set.
    std::vector<int16_t> replay{5, 0, 1, 2, 3, 4, 0, 1}, ex2(R * 2);
    V w2(R * 2);
    REQUIRE(route(s, R, logits.data(), replay.data(), ex2.data(), w2.data()));
    CHECK(ex2 == replay);
    if (norm) CHECK(w2[0] == Approx(1.0 / (1.0 + std::exp(logits[0] - logits[5]))));
    std::vector<int16_t> bad{9, 0, 1, 2, 3, 4, 0, 1};
    CHECK_FALSE(route(s, R, logits.data(), bad.data(), ex2.data(), w2.data()));

    V cw = random_vector(R * 2, 27);
    auto loss = [&] {
      std::vector<int16_t> e(R * 2);
      V ww(R * 2);
      route(s, R, logits.data(), ex.data(), e.data(), ww.data());  // fixed choice: top-k is not differentiable
      return dot(ww, cw);
    };
    V dl(R * s.num_experts);
    route_backward(s, R, logits.data(), ex.data(), w.data(), cw.data(), dl.data());
    check_gradient(norm ? "dlogits (renormalised)" : "dlogits (softmax)", logits, dl, loss);
  }
}

TEST_CASE("routed SwiGLU experts: forward against a direct sum, backward") {
  const MoeShape s{5, 4, 2, 3, true};
  const int64_t R = 6, H = s.hidden, I = s.intermediate, E = s.num_experts;
  V x = random_vector(R * H, 28), gu = random_vector(E * 2 * I * H, 29, 0.5), down = random_vector(E * H * I, 30, 0.5);
  V wts = random_vector(R * 2, 31), c = random_vector(R * H, 32);
  std::vector<int16_t> ex{0, 1, 2, 3, 1, 0, 3, 2, 2, 2, 0, 3};
  ex[9] = 1;  // keep the two slots of a token distinct
  V y(R * H, 0.0);
  experts_forward(s, R, x.data(), ex.data(), wts.data(), gu.data(), down.data(), y.data());
  for (int64_t r = 0; r < R; ++r)
    for (int64_t o = 0; o < H; ++o) {
      double sum = 0;
      for (int64_t slot = 0; slot < 2; ++slot) {
        int64_t e = ex[r * 2 + slot];
        for (int64_t i = 0; i < I; ++i) {
          double g = 0, u = 0;
          for (int64_t h = 0; h < H; ++h) {
            g += gu[(e * 2 * I + i) * H + h] * x[r * H + h];
            u += gu[(e * 2 * I + I + i) * H + h] * x[r * H + h];
          }
          sum += wts[r * 2 + slot] * down[(e * H + o) * I + i] * silu(g) * u;
        }
      }
      CHECK(y[r * H + o] == Approx(sum).epsilon(1e-12));
    }
  auto loss = [&] {
    V out(R * H, 0.0);
    experts_forward(s, R, x.data(), ex.data(), wts.data(), gu.data(), down.data(), out.data());
    return dot(out, c);
  };
  V dx(R * H, 0.0), dw(R * 2), dgu(E * 2 * I * H, 0.0), ddown(E * H * I, 0.0);
  experts_backward(s, R, x.data(), ex.data(), wts.data(), gu.data(), down.data(), c.data(), dx.data(), dw.data(),
                   dgu.data(), ddown.data());
  check_gradient("dx", x, dx, loss);
  check_gradient("dweights", wts, dw, loss);
  check_gradient("dgate_up", gu, dgu, loss);
  check_gradient("ddown", down, ddown, loss);
}
