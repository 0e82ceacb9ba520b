// An MPI program (one process per TP rank, mpirun -np tp) that checks the vocabulary-parallel
// log-softmax (model/parallel/vocab_parallel.hpp) against a float64 computation over the whole
// rows on one rank: for vocabularies that split evenly and unevenly over the ranks, with padding
// ids beyond `valid` (including ranks that hold padding only), every rank compares its results
// with the reference: lse and logprob of each row's target, the gradient of its slice, the top
// candidates, and the rows gathered whole (bit for bit). World rank 0 prints one JSON line with
// the largest differences; every rank exits 1 past the bounds.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <numeric>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/parallel/mpi_communicator.hpp"
#include "model/parallel/vocab_parallel.hpp"

using namespace mlpt::ref;

namespace {

struct Case {
  int64_t vocab, valid;
};

// The largest differences over all cases, and whether everything exact was exact.
struct Found {
  double lse = 0, logprob = 0, grad = 0, top = 0;
  bool top_ids_equal = true, gathered_equal = true, ranges_cover = true;
};

void check_case(Communicator* tensor, const Case& c, Found& f) {
  const int tp = tensor->size(), rank = tensor->rank();
  constexpr int64_t kRows = 7, kTop = 5;
  // The same pseudo-random logits on every rank, spread wide enough that exp() spans many
  // magnitudes; row 3 has one dominant logit, row 5 ties (two equal maxima).
  std::vector<float> logits(static_cast<size_t>(kRows * c.vocab));
  uint64_t x = 0x9e3779b97f4a7c15ull ^ static_cast<uint64_t>(c.vocab * 131 + c.valid);
  for (float& l : logits) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    l = static_cast<float>(static_cast<double>(x >> 40) / double(1 << 24) * 24.0 - 12.0);
  }
  logits[static_cast<size_t>(3 * c.vocab + c.valid / 2)] = 40.0f;
  logits[static_cast<size_t>(5 * c.vocab + 1)] = logits[static_cast<size_t>(5 * c.vocab + c.valid - 1)] =
      30.0f;
  std::vector<int32_t> targets(kRows);
  for (int64_t i = 0; i < kRows; ++i) targets[i] = static_cast<int32_t>((i * 977 + 13) % c.valid);
  targets[3] = static_cast<int32_t>(c.valid / 2);
  std::vector<double> coef{0.5, -1.25, 0.0, 2.0, -0.75, 1.0, 0.125};

  // The float64 reference over the whole rows.
  std::vector<double> lse_ref(kRows), lp_ref(kRows);
  for (int64_t i = 0; i < kRows; ++i) {
    const float* l = logits.data() + i * c.vocab;
    double mx = -INFINITY, z = 0;
    for (int64_t v = 0; v < c.valid; ++v) mx = std::max(mx, static_cast<double>(l[v]));
    for (int64_t v = 0; v < c.valid; ++v) z += std::exp(static_cast<double>(l[v]) - mx);
    lse_ref[i] = mx + std::log(z);
    lp_ref[i] = static_cast<double>(l[targets[i]]) - lse_ref[i];
  }

  // This rank's slice.
  const VocabRange range = vocab_range(c.vocab, tp, rank);
  std::vector<int64_t> begins(static_cast<size_t>(tp + 1), c.vocab);
  for (int r = 0; r < tp; ++r) begins[static_cast<size_t>(r)] = vocab_range(c.vocab, tp, r).begin;
  for (int r = 0; r < tp; ++r)  // contiguous, in rank order, sizes within one of each other
    f.ranges_cover = f.ranges_cover &&
                     vocab_range(c.vocab, tp, r).end == begins[static_cast<size_t>(r + 1)] &&
                     std::abs(vocab_range(c.vocab, tp, r).count() - c.vocab / tp) <= 1;
  const int64_t n = range.count();
  std::vector<float> slice(static_cast<size_t>(kRows * n));
  for (int64_t i = 0; i < kRows; ++i)
    std::copy_n(logits.data() + i * c.vocab + range.begin, n, slice.data() + i * n);

  std::vector<double> lse(kRows), lp(kRows);
  vocab_log_softmax(tensor, range, c.valid, kRows, slice.data(), targets.data(), lse.data(), lp.data());
  for (int64_t i = 0; i < kRows; ++i) {
    f.lse = std::max(f.lse, std::abs(lse[i] - lse_ref[i]));
    f.logprob = std::max(f.logprob, std::abs(lp[i] - lp_ref[i]));
  }

  // The gradient of Σ coef · logprob on this slice against coef · (onehot − softmax) in float64.
  std::vector<float> dl(slice.size());
  vocab_log_softmax_backward(range, c.valid, kRows, slice.data(), targets.data(), lse.data(), coef.data(),
                             dl.data());
  for (int64_t i = 0; i < kRows; ++i)
    for (int64_t j = 0; j < n; ++j) {
      const int64_t v = range.begin + j;
      double want = 0;
      if (v < c.valid) want = -coef[i] * std::exp(static_cast<double>(logits[i * c.vocab + v]) - lse_ref[i]);
      if (v == targets[i]) want += coef[i];
      f.grad = std::max(f.grad, std::abs(static_cast<double>(dl[i * n + j]) - want));
    }

  // Top candidates: the ids of the one-rank order, their log-softmax values.
  const auto top = vocab_top_logprobs(tensor, range, c.valid, kRows, slice.data(), lse.data(), kTop);
  std::vector<int32_t> ids(static_cast<size_t>(c.valid));
  for (int64_t i = 0; i < kRows; ++i) {
    const float* l = logits.data() + i * c.vocab;
    std::iota(ids.begin(), ids.end(), 0);
    std::stable_sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) { return l[a] > l[b]; });
    f.top_ids_equal = f.top_ids_equal && static_cast<int64_t>(top[i].size()) == std::min(kTop, c.valid);
    for (size_t j = 0; j < top[i].size(); ++j) {
      f.top_ids_equal = f.top_ids_equal && top[i][j].first == ids[j];
      f.top = std::max(f.top, std::abs(top[i][j].second - (static_cast<double>(l[ids[j]]) - lse_ref[i])));
    }
  }

  // Rows gathered whole for sampling: exactly the rows.
  const std::vector<float> whole = gather_vocab_rows(tensor, c.vocab, kRows, slice.data());
  f.gathered_equal = f.gathered_equal && whole == logits;
}

int check(int argc, char** argv) {
  int tp = 2;
  for (int i = 1; i + 1 < argc; ++i)
    if (std::string(argv[i]) == "--tp") tp = std::stoi(argv[++i]);
  MpiModelLayout layout(tp, 1);
  Communicator* tensor = layout.groups().tensor;
  // Even and uneven splits; padding ids in the last rank's range, across a boundary, and a
  // padding-only range (valid 100 of 1003: every rank but the first holds padding only).
  const std::vector<Case> cases{{1152, 1152}, {1152, 1100}, {1003, 1003},
                                {1003, 1000}, {1003, 100},  {tp + 1, tp}};
  Found f;
  for (const Case& c : cases) check_case(tensor, c, f);
  // Float64 sums over at most ~1000 terms, the exp sums carried as two floats (48 bits): 1e-12 is
  // a thousand times what either rounds to. The gradient is float32: two roundings of values <= 2
  // (the softmax term, then the target's coefficient added), 2 · 2 · 2^-24.
  const bool ok = f.lse <= 1e-12 && f.logprob <= 1e-12 && f.top <= 1e-12 && f.grad <= 2.4e-7 &&
                  f.top_ids_equal && f.gathered_equal && f.ranges_cover;
  if (tensor->rank() == 0)
    std::cout << nlohmann::json{{"tp", tp},
                                {"max_lse_diff", f.lse},
                                {"max_logprob_diff", f.logprob},
                                {"max_grad_diff", f.grad},
                                {"max_top_diff", f.top},
                                {"top_ids_equal", f.top_ids_equal},
                                {"gathered_equal", f.gathered_equal},
                                {"ranges_cover", f.ranges_cover}}
                     .dump()
              << std::endl;
  return ok ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return check(argc, argv);
  } catch (const std::exception& e) {
    std::cerr << "vocab_parallel_check: " << e.what() << "\n";
    return 1;
  }
}
