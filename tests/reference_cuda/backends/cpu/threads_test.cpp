// Results must not depend on the thread count (tasks are independent (sequence, head) pairs):
// every op run with 1 and with 2 OpenMP threads on problems above the parallel threshold must be
// bitwise equal.
#include <catch2/catch.hpp>

#if defined(_OPENMP)
#include <omp.h>
#endif

#include "backends/cpu/attention.hpp"
#include "seqops_testing.hpp"

using namespace seqops_testing;

TEST_CASE("sequence ops give bitwise the same results with 1 and 2 threads", "[gdn][attention][threads]") {
#if !defined(_OPENMP)
  SUCCEED("built without OpenMP: single-threaded by construction");
#else
  GdnProblem p = make_gdn(500, {2, 4, 32, 32}, {300, 77, 129}, true);
  std::mt19937_64 rng(501);
  const Vec<float> R = cast<float>(uniform<double>(rng, p.out_size(), -1, 1));
  const Vec<float> RF = cast<float>(uniform<double>(rng, p.state_size(), -1, 1));
  const mlpt::ref::cpu::AttentionShape as{4, 2, 32};
  const std::vector<int64_t> qo = offsets_of({200, 1, 150}), ko = offsets_of({200, 300, 150});
  const Vec<float> aq = cast<float>(uniform<double>(rng, size_t(qo.back() * 4 * 32), -1, 1));
  const Vec<float> ak = cast<float>(uniform<double>(rng, size_t(ko.back() * 2 * 32), -1, 1));
  const Vec<float> av = cast<float>(uniform<double>(rng, ak.size(), -1, 1));
  auto run_all = [&] {
    std::vector<Vec<float>> r;
    Vec<float> fs;
    r.push_back(run_gdn<float>(p, false, &fs));
    r.push_back(fs);
    r.push_back(run_gdn<float>(p, true, &fs));
    r.push_back(fs);
    Vec<float> q = cast<float>(p.q), k = cast<float>(p.k), v = cast<float>(p.v), g = cast<float>(p.g),
               b = cast<float>(p.beta), init = cast<float>(p.init);
    Vec<float> dq(q.size()), dk(k.size()), dv(v.size()), dg(g.size()), db(b.size()), di(init.size());
    mlpt::ref::cpu::gdn_backward<float>(p.shape, p.offsets.data(), p.num_seqs(), q.data(), k.data(), v.data(),
                                        g.data(), b.data(), init.data(), R.data(), RF.data(), dq.data(), dk.data(),
                                        dv.data(), dg.data(), db.data(), di.data());
    for (auto* x : {&dq, &dk, &dv, &dg, &db, &di}) r.push_back(*x);
    Vec<float> o(aq.size()), gq(aq.size()), gk(ak.size()), gv(ak.size());
    mlpt::ref::cpu::attention_forward<float>(as, qo.data(), ko.data(), 3, aq.data(), ak.data(), av.data(), o.data());
    mlpt::ref::cpu::attention_backward<float>(as, qo.data(), ko.data(), 3, aq.data(), ak.data(), av.data(), aq.data(),
                                              gq.data(), gk.data(), gv.data());
    for (auto* x : {&o, &gq, &gk, &gv}) r.push_back(*x);
    return r;
  };
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  auto one = run_all();
  omp_set_num_threads(2);
  auto two = run_all();
  omp_set_num_threads(saved);
  REQUIRE(one.size() == two.size());
  for (size_t i = 0; i < one.size(); ++i) {
    INFO("result " << i);
    CHECK(one[i] == two[i]);
  }
#endif
}
