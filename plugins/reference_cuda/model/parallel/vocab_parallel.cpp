#include "model/parallel/vocab_parallel.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <type_traits>

#include "model/sampling.hpp"
#include "mlpt/sdk/error.hpp"

namespace mlpt::ref {

namespace {

bool alone(const Communicator* group) {
  return !group || group->size() == 1;
}

// The valid ids of a range: [begin, min(end, valid)), as a count from begin.
int64_t valid_count(const VocabRange& range, int64_t valid) {
  return std::clamp<int64_t>(valid - range.begin, 0, range.count());
}

// Every rank's `mine` (the same count on each), in rank order, on every rank.
std::vector<float> gather_equal(Communicator* group, const std::vector<float>& mine) {
  const std::vector<size_t> counts(static_cast<size_t>(group->size()), mine.size());
  std::vector<float> all(mine.size() * counts.size());
  group->all_gather_v(mine.data(), mine.size(), all.data(), counts.data());
  return all;
}

// A rank's part of one row's log-softmax: the max of its valid logits, Σ exp(logit − max) in
// double carried as two floats (hi + lo keeps about 48 bits), and the target's logit where it holds
// the target.
constexpr size_t kRowStats = 5;  // max, sum hi, sum lo, target logit, holds target (1 or 0)

}  // namespace

VocabRange vocab_range(int64_t vocab, int parts, int rank) {
  if (parts < 1 || rank < 0 || rank >= parts)
    throw sdk::Error(MLPT_INVALID_ARGUMENT,
                     "vocabulary range: rank " + std::to_string(rank) + " of " + std::to_string(parts));
  const int64_t base = vocab / parts, extra = vocab % parts;
  const int64_t begin = rank * base + std::min<int64_t>(rank, extra);
  return {begin, begin + base + (rank < extra ? 1 : 0)};
}

VocabRange vocab_range(int64_t vocab, const ModelShard& shard) {
  return shard.vocab_parallel && shard.tp > 1 ? vocab_range(vocab, shard.tp, shard.tp_rank)
                                              : VocabRange{0, vocab};
}

template <class T>
void vocab_log_softmax(Communicator* tensor, const VocabRange& range, int64_t valid, int64_t rows,
                       const T* logits, const int32_t* targets, double* lse, double* logprob) {
  const int64_t n = range.count();
  if (alone(tensor)) {  // the whole vocabulary here: token_logprob's arithmetic, unchanged
    for (int64_t i = 0; i < rows; ++i) {
      const T* row = logits + i * n;
      logprob[i] = token_logprob(row, valid, targets[i]);
      lse[i] = static_cast<double>(row[targets[i]]) - logprob[i];
    }
    return;
  }
  if constexpr (!std::is_same_v<T, float>) {
    throw sdk::Error(MLPT_UNIMPLEMENTED, "vocabulary parallelism computes in float32 only");
  } else {
    const int64_t mine = valid_count(range, valid);
    std::vector<float> stats(static_cast<size_t>(rows) * kRowStats, 0.0f);
    for (int64_t i = 0; i < rows; ++i) {
      const float* row = logits + i * n;
      float* s = stats.data() + i * kRowStats;
      double mx = -INFINITY, z = 0;
      for (int64_t v = 0; v < mine; ++v) mx = std::max(mx, static_cast<double>(row[v]));
      for (int64_t v = 0; v < mine; ++v) z += std::exp(static_cast<double>(row[v]) - mx);
      s[0] = static_cast<float>(mx);  // exact: the max of floats
      s[1] = static_cast<float>(z);
      s[2] = static_cast<float>(z - static_cast<double>(s[1]));
      if (range.holds(targets[i])) s[3] = row[targets[i] - range.begin], s[4] = 1.0f;
    }
    const std::vector<float> all = gather_equal(tensor, stats);
    const size_t per_rank = stats.size();
    for (int64_t i = 0; i < rows; ++i) {
      double mx = -INFINITY, z = 0, target = NAN;
      for (size_t r = 0; r < static_cast<size_t>(tensor->size()); ++r)
        mx = std::max(mx, static_cast<double>(all[r * per_rank + static_cast<size_t>(i) * kRowStats]));
      for (size_t r = 0; r < static_cast<size_t>(tensor->size()); ++r) {
        const float* s = all.data() + r * per_rank + static_cast<size_t>(i) * kRowStats;
        if (s[0] > -INFINITY)
          z += (static_cast<double>(s[1]) + static_cast<double>(s[2])) *
               std::exp(static_cast<double>(s[0]) - mx);
        if (s[4] != 0.0f) target = s[3];
      }
      logprob[i] = target - mx - std::log(z);
      lse[i] = target - logprob[i];
    }
  }
}

template <class T>
void vocab_log_softmax_backward(const VocabRange& range, int64_t valid, int64_t rows, const T* logits,
                                const int32_t* targets, const double* lse, const double* coef, T* dlogits) {
  const int64_t n = range.count(), mine = valid_count(range, valid);
  for (int64_t i = 0; i < rows; ++i) {
    const T* l = logits + i * n;
    T* dl = dlogits + i * n;
    if (coef[i] == 0.0) {  // no gradient: zeros, not −0 · softmax
      std::fill(dl, dl + n, T(0));
      continue;
    }
    for (int64_t v = 0; v < mine; ++v)
      dl[v] = static_cast<T>(-coef[i] * std::exp(static_cast<double>(l[v]) - lse[i]));
    std::fill(dl + mine, dl + n, T(0));
    if (range.holds(targets[i])) dl[targets[i] - range.begin] += static_cast<T>(coef[i]);
  }
}

std::vector<std::vector<std::pair<int32_t, double>>> vocab_top_logprobs(Communicator* tensor,
                                                                        const VocabRange& range,
                                                                        int64_t valid, int64_t rows,
                                                                        const float* logits,
                                                                        const double* lse, int64_t n) {
  std::vector<std::vector<std::pair<int32_t, double>>> out(static_cast<size_t>(rows));
  const int64_t width = range.count();
  if (alone(tensor)) {
    for (int64_t i = 0; i < rows; ++i)
      out[static_cast<size_t>(i)] = top_logprobs(logits + i * width, valid, n);
    return out;
  }
  // Candidate ids (< valid, alike on every rank) travel as floats, exact below 2^24.
  if (valid > (int64_t{1} << 24))
    throw sdk::Error(
        MLPT_UNIMPLEMENTED,
        "vocabulary parallel top logprobs: ids above 2^24 (valid vocabulary " + std::to_string(valid) + ")");
  n = std::min(n, valid);
  const int64_t mine = valid_count(range, valid), kept = std::min(n, mine);
  auto before = [](float la, int32_t a, float lb, int32_t b) { return la > lb || (la == lb && a < b); };
  std::vector<float> candidates(static_cast<size_t>(rows * n * 2));
  std::vector<int32_t> ids(static_cast<size_t>(mine));
  for (int64_t i = 0; i < rows; ++i) {  // this rank's n best (logit, id), padded with (−inf, −1)
    const float* l = logits + i * width;
    std::iota(ids.begin(), ids.end(), 0);
    std::partial_sort(ids.begin(), ids.begin() + kept, ids.end(),
                      [&](int32_t a, int32_t b) { return before(l[a], a, l[b], b); });
    float* c = candidates.data() + i * n * 2;
    for (int64_t j = 0; j < n; ++j) {
      c[2 * j] = j < kept ? l[ids[j]] : -INFINITY;
      c[2 * j + 1] = j < kept ? static_cast<float>(range.begin + ids[j]) : -1.0f;
    }
  }
  const std::vector<float> all = gather_equal(tensor, candidates);
  std::vector<std::pair<float, int32_t>> row;
  for (int64_t i = 0; i < rows; ++i) {
    row.clear();
    for (size_t r = 0; r < static_cast<size_t>(tensor->size()); ++r)
      for (int64_t j = 0; j < n; ++j) {
        const float* c = all.data() + r * candidates.size() + (i * n + j) * 2;
        if (c[1] >= 0) row.push_back({c[0], static_cast<int32_t>(c[1])});
      }
    std::sort(row.begin(), row.end(),
              [&](const auto& a, const auto& b) { return before(a.first, a.second, b.first, b.second); });
    for (int64_t j = 0; j < n && j < static_cast<int64_t>(row.size()); ++j)
      out[static_cast<size_t>(i)].push_back({row[j].second, static_cast<double>(row[j].first) - lse[i]});
  }
  return out;
}

std::vector<float> gather_vocab_rows(Communicator* tensor, int64_t vocab, int64_t rows, const float* logits) {
  if (alone(tensor)) return std::vector<float>(logits, logits + rows * vocab);
  const int tp = tensor->size();
  std::vector<size_t> counts(static_cast<size_t>(tp));
  for (int r = 0; r < tp; ++r)
    counts[static_cast<size_t>(r)] = static_cast<size_t>(rows * vocab_range(vocab, tp, r).count());
  std::vector<float> parts(static_cast<size_t>(rows * vocab)), out(parts.size());
  tensor->all_gather_v(logits, counts[static_cast<size_t>(tensor->rank())], parts.data(), counts.data());
  const float* from = parts.data();
  for (int r = 0; r < tp; ++r) {  // rank r's [rows, count] slice into columns [begin, end) of each row
    const VocabRange range = vocab_range(vocab, tp, r);
    for (int64_t i = 0; i < rows; ++i, from += range.count())
      std::copy_n(from, range.count(), out.data() + i * vocab + range.begin);
  }
  return out;
}

template void vocab_log_softmax<float>(Communicator*, const VocabRange&, int64_t, int64_t, const float*,
                                       const int32_t*, double*, double*);
template void vocab_log_softmax<double>(Communicator*, const VocabRange&, int64_t, int64_t, const double*,
                                        const int32_t*, double*, double*);
template void vocab_log_softmax_backward<float>(const VocabRange&, int64_t, int64_t, const float*,
                                                const int32_t*, const double*, const double*, float*);
template void vocab_log_softmax_backward<double>(const VocabRange&, int64_t, int64_t, const double*,
                                                 const int32_t*, const double*, const double*, double*);

}  // namespace mlpt::ref
