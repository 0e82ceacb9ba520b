#include "model/scoring.hpp"

#include "model/sampling.hpp"

namespace mlpt::ref {

template <class T>
ScoreResult<T> score_sequences(const Weights<T>& w, ForwardBatch<T>& b, int64_t valid, int64_t top_n) {
  std::vector<T> hidden = forward_hidden(w, b);
  const int64_t N = b.num_tokens(), H = w.config.hidden_size, V = w.config.vocab_size;
  ScoreResult<T> r;
  if (!w.config.shard.last_stage()) return r;  // the last pipeline stage has the LM head
  r.logprobs.assign(static_cast<size_t>(N), 0.0);
  if (top_n > 0) r.top.resize(static_cast<size_t>(N));
  std::vector<bool> last(static_cast<size_t>(N), false);
  for (size_t s = 0; s < b.num_segments(); ++s)
    if (b.offsets[s + 1] > b.offsets[s]) last[b.offsets[s + 1] - 1] = true;
  constexpr int64_t kBlock = 64;
  std::vector<T> logits(kBlock * V);
  std::vector<float> row(top_n > 0 ? V : 0);
  for (int64_t r0 = 0; r0 < N; r0 += kBlock) {
    int64_t n = std::min(kBlock, N - r0);
    lm_head_forward(w, n, hidden.data() + r0 * H, logits.data());
    for (int64_t i = 0; i < n; ++i) {
      int64_t t = r0 + i;
      const T* l = logits.data() + i * V;
      if (!last[t]) r.logprobs[t + 1] = token_logprob(l, valid, b.tokens[t + 1]);
      if (top_n > 0) {
        for (int64_t v = 0; v < V; ++v) row[v] = static_cast<float>(l[v]);
        r.top[t] = top_logprobs(row.data(), valid, top_n);
      }
    }
  }
  return r;
}

template ScoreResult<float> score_sequences<float>(const Weights<float>&, ForwardBatch<float>&, int64_t, int64_t);
template ScoreResult<double> score_sequences<double>(const Weights<double>&, ForwardBatch<double>&, int64_t, int64_t);

}  // namespace mlpt::ref
