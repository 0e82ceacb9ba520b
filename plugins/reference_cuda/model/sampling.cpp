#include "model/sampling.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "model/counter_uniform.hpp"

namespace mlpt::ref {

SampledToken sample_token(const float* logits, int64_t valid, const SamplingParams& p, uint64_t counter) {
  const double inv_t = 1.0 / static_cast<double>(p.temperature);
  double mx = -INFINITY;
  for (int64_t i = 0; i < valid; ++i) mx = std::max(mx, static_cast<double>(logits[i]) * inv_t);
  std::vector<double> w(static_cast<size_t>(valid));
  for (int64_t i = 0; i < valid; ++i) w[i] = std::exp(static_cast<double>(logits[i]) * inv_t - mx);
  const double u = counter_uniform(p.seed, counter);

  std::vector<int32_t> candidates;  // empty = the whole vocabulary in id order
  bool filter = (p.top_k > 0 && p.top_k < valid) || p.top_p < 1.0f;
  if (filter) {
    candidates.resize(static_cast<size_t>(valid));
    std::iota(candidates.begin(), candidates.end(), 0);
    auto by_prob = [&](int32_t a, int32_t b) { return w[a] > w[b] || (w[a] == w[b] && a < b); };
    int64_t keep = p.top_k > 0 ? std::min<int64_t>(p.top_k, valid) : valid;
    std::partial_sort(candidates.begin(), candidates.begin() + keep, candidates.end(), by_prob);
    candidates.resize(static_cast<size_t>(keep));
    if (p.top_p < 1.0f) {
      double total = 0;
      for (int32_t c : candidates) total += w[c];
      double cum = 0;
      size_t n = 0;
      while (n < candidates.size()) {  // the smallest prefix whose mass reaches top_p
        cum += w[candidates[n++]];
        if (cum >= static_cast<double>(p.top_p) * total) break;
      }
      candidates.resize(n);
    }
  }
  double z = 0;
  if (filter)
    for (int32_t c : candidates) z += w[c];
  else
    for (double v : w) z += v;
  double target = u * z, acc = 0;
  int32_t chosen = -1;
  const int64_t n = filter ? static_cast<int64_t>(candidates.size()) : valid;
  for (int64_t i = 0; i < n; ++i) {
    int32_t id = filter ? candidates[i] : static_cast<int32_t>(i);
    acc += w[id];
    if (acc > target) {
      chosen = id;
      break;
    }
  }
  if (chosen < 0) {  // rounding at the very top: take the last candidate with mass
    for (int64_t i = n - 1; i >= 0 && chosen < 0; --i) {
      int32_t id = filter ? candidates[i] : static_cast<int32_t>(i);
      if (w[id] > 0) chosen = id;
    }
  }
  return {chosen, static_cast<float>(std::log(w[chosen] / z))};
}

template <class T>
double token_logprob(const T* logits, int64_t valid, int32_t token) {
  double mx = -INFINITY;
  for (int64_t i = 0; i < valid; ++i) mx = std::max(mx, static_cast<double>(logits[i]));
  double z = 0;
  for (int64_t i = 0; i < valid; ++i) z += std::exp(static_cast<double>(logits[i]) - mx);
  return static_cast<double>(logits[token]) - mx - std::log(z);
}

template double token_logprob<float>(const float*, int64_t, int32_t);
template double token_logprob<double>(const double*, int64_t, int32_t);

std::vector<std::pair<int32_t, double>> top_logprobs(const float* logits, int64_t valid, int64_t n) {
  n = std::min(n, valid);
  std::vector<int32_t> ids(static_cast<size_t>(valid));
  std::iota(ids.begin(), ids.end(), 0);
  std::partial_sort(ids.begin(), ids.begin() + n, ids.end(),
                    [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); });
  double mx = valid ? logits[ids[0]] : 0, z = 0;
  for (int64_t i = 0; i < valid; ++i) z += std::exp(static_cast<double>(logits[i]) - mx);
  std::vector<std::pair<int32_t, double>> out;
  for (int64_t i = 0; i < n; ++i) out.push_back({ids[i], static_cast<double>(logits[ids[i]]) - mx - std::log(z)});
  return out;
}

}  // namespace mlpt::ref
