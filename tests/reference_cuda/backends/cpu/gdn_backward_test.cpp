// GDN backward (gdn_backward) against central finite differences of the float64 recurrence, for
// every element of every input (q, k, v, g, beta, initial state), with the loss a random projection
// of the outputs and of the final state; and the float backward against the double one.
//
// Tolerance: with h = 1e-5 the central difference has truncation error ~h^2 |L'''| ~ 1e-10 and
// round-off ~eps |L| / h ~ 1e-11, so analytic and numeric gradients must agree to 1e-7 relative
// (to the largest gradient of that tensor); a wrong term in the adjoint shows up at >= 1e-3.
#include <catch2/catch.hpp>

#include "seqops_testing.hpp"

using namespace seqops_testing;
using mlpt::ref::cpu::GdnShape;

namespace {

struct Grads {
  Vec<double> q, k, v, g, beta, init;
};

template <class T>
struct Backward {
  Vec<T> dq, dk, dv, dg, dbeta, dinit;
};

template <class T>
Backward<T> run_backward(const GdnProblem& p, const Vec<double>& d_out, const Vec<double>* d_final,
                         bool want_dinit) {
  Vec<T> q = cast<T>(p.q), k = cast<T>(p.k), v = cast<T>(p.v), g = cast<T>(p.g), b = cast<T>(p.beta),
         init = cast<T>(p.init), dO = cast<T>(d_out), dF = d_final ? cast<T>(*d_final) : Vec<T>{};
  Backward<T> r{Vec<T>(q.size(), T(7)), Vec<T>(k.size(), T(7)), Vec<T>(v.size(), T(7)), Vec<T>(g.size(), T(7)),
                Vec<T>(b.size(), T(7)), Vec<T>(want_dinit ? p.state_size() : 0, T(7))};  // 7: must be overwritten
  mlpt::ref::cpu::gdn_backward<T>(p.shape, p.offsets.data(), p.num_seqs(), q.data(), k.data(), v.data(), g.data(),
                                  b.data(), init.empty() ? nullptr : init.data(), dO.data(),
                                  d_final ? dF.data() : nullptr, r.dq.data(), r.dk.data(), r.dv.data(), r.dg.data(),
                                  r.dbeta.data(), want_dinit ? r.dinit.data() : nullptr);
  return r;
}

void check_against_fd(GdnProblem p, uint64_t seed, bool with_final) {
  std::mt19937_64 rng(seed);
  const Vec<double> R = uniform<double>(rng, p.out_size(), -1, 1);
  const Vec<double> RF = uniform<double>(rng, p.state_size(), -1, 1);
  const bool has_init = !p.init.empty();
  auto loss = [&] {
    Vec<double> fs;
    Vec<double> out = run_gdn<double>(p, false, &fs);
    return dot(out, R) + (with_final ? dot(fs, RF) : 0.0);
  };
  Backward<double> an = run_backward<double>(p, R, with_final ? &RF : nullptr, true);
  const double h = 1e-5, tol = 1e-7;
  struct Input { const char* name; Vec<double>* x; const Vec<double>* grad; };
  std::vector<Input> inputs{{"q", &p.q, &an.dq}, {"k", &p.k, &an.dk}, {"v", &p.v, &an.dv},
                            {"g", &p.g, &an.dg}, {"beta", &p.beta, &an.dbeta}};
  if (has_init) inputs.push_back({"initial_state", &p.init, &an.dinit});
  for (const Input& in : inputs) {
    Vec<double> fd = finite_differences(*in.x, loss, h);
    const double err = rel_err(*in.grad, fd, 1.0);
    INFO("d_" << in.name << ": rel err " << err << " over " << fd.size() << " elements");
    CHECK(err < tol);
  }
  if (!has_init) {  // d_initial_state with a null initial state: the gradient at a zero state
    p.init.assign(p.state_size(), 0.0);
    Vec<double> fd = finite_differences(p.init, loss, h);
    INFO("d_initial_state at a zero state: rel err " << rel_err(an.dinit, fd, 1.0));
    CHECK(rel_err(an.dinit, fd, 1.0) < tol);
  }
}

}  // namespace

TEST_CASE("gdn backward matches finite differences: one sequence across two chunks", "[gdn][backward]") {
  SECTION("Hk=1, Hv=2, dk=dv=4, T=70, initial state, d_final_state") {
    check_against_fd(make_gdn(101, {1, 2, 4, 4}, {70}, true), 1, true);
  }
  SECTION("Hk=1, Hv=2, dk=4, dv=6, T=70, no initial state, no d_final_state") {
    check_against_fd(make_gdn(102, {1, 2, 4, 6}, {70}, false), 2, false);
  }
}

TEST_CASE("gdn backward matches finite differences: packed batch, Hv=2Hk", "[gdn][backward]") {
  // Three sequences (one spanning two chunks, one of length 1, one empty) and shared key heads.
  check_against_fd(make_gdn(103, {2, 4, 8, 4}, {66, 1, 0, 9}, true), 3, true);
}

TEST_CASE("gdn backward with strong decay and g = 0 matches finite differences", "[gdn][backward]") {
  check_against_fd(make_gdn(104, {1, 2, 4, 4}, {40}, true, -8.0, -3.0), 4, true);
  check_against_fd(make_gdn(105, {1, 1, 4, 4}, {40}, true, 0.0, 0.0), 5, true);
}

TEST_CASE("gdn float backward agrees with double", "[gdn][backward]") {
  GdnProblem p = make_gdn(106, {2, 4, 32, 32}, {140, 17}, true);
  std::mt19937_64 rng(6);
  const Vec<double> R = uniform<double>(rng, p.out_size(), -1, 1);
  const Vec<double> RF = uniform<double>(rng, p.state_size(), -1, 1);
  Backward<double> d = run_backward<double>(p, R, &RF, true);
  Backward<float> f = run_backward<float>(p, R, &RF, true);
  // float vs double: the adjoint is as well conditioned as the forward (see gdn_forward_test.cpp).
  CHECK(rel_err(f.dq, d.dq) < 1e-4);
  CHECK(rel_err(f.dk, d.dk) < 1e-4);
  CHECK(rel_err(f.dv, d.dv) < 1e-4);
  CHECK(rel_err(f.dg, d.dg) < 1e-4);
  CHECK(rel_err(f.dbeta, d.dbeta) < 1e-4);
  CHECK(rel_err(f.dinit, d.dinit) < 1e-4);
  CHECK(all_finite(f.dg));
}
