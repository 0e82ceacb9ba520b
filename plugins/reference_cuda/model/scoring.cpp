#include "model/scoring.hpp"

#include "model/parallel/vocab_parallel.hpp"
#include "model/sampling.hpp"

namespace mlpt::ref {

template <class T>
ScoreResult<T> score_sequences(const Weights<T>& w, ForwardBatch<T>& b, int64_t valid, int64_t top_n) {
  std::vector<T> hidden = forward_hidden(w, b);
  const int64_t N = b.num_tokens(), H = w.config.hidden_size;
  ScoreResult<T> r;
  if (!w.config.shard.last_stage()) return r;  // the last pipeline stage has the LM head
  // This rank's vocabulary range's logits; the log-softmax over every rank's (vocab_parallel.hpp).
  const VocabRange vocab = vocab_range(w.config.vocab_size, w.config.shard);
  Communicator* tensor = b.parallel && vocab.count() < w.config.vocab_size ? b.parallel->tensor : nullptr;
  const int64_t V = vocab.count();
  r.logprobs.assign(static_cast<size_t>(N), 0.0);
  if (top_n > 0) r.top.resize(static_cast<size_t>(N));
  std::vector<bool> last(static_cast<size_t>(N), false);
  for (size_t s = 0; s < b.num_segments(); ++s)
    if (b.offsets[s + 1] > b.offsets[s]) last[b.offsets[s + 1] - 1] = true;
  constexpr int64_t kBlock = 64;
  std::vector<T> logits(kBlock * V);
  std::vector<float> block(top_n > 0 ? kBlock * V : 0);
  std::vector<int32_t> targets(kBlock);
  std::vector<double> lse(kBlock), logprob(kBlock);
  for (int64_t r0 = 0; r0 < N; r0 += kBlock) {
    int64_t n = std::min(kBlock, N - r0);
    lm_head_forward(w, n, hidden.data() + r0 * H, logits.data());
    // A sequence's last token predicts nothing scored: its row takes token 0 as a stand-in target.
    for (int64_t i = 0; i < n; ++i) targets[i] = r0 + i + 1 < N ? b.tokens[r0 + i + 1] : 0;
    vocab_log_softmax(tensor, vocab, valid, n, logits.data(), targets.data(), lse.data(), logprob.data());
    for (int64_t i = 0; i < n; ++i)
      if (!last[r0 + i]) r.logprobs[r0 + i + 1] = logprob[i];
    if (top_n > 0) {
      for (int64_t i = 0; i < n * V; ++i) block[i] = static_cast<float>(logits[i]);
      auto top = vocab_top_logprobs(tensor, vocab, valid, n, block.data(), lse.data(), top_n);
      for (int64_t i = 0; i < n; ++i) r.top[r0 + i] = std::move(top[i]);
    }
  }
  return r;
}

template ScoreResult<float> score_sequences<float>(const Weights<float>&, ForwardBatch<float>&, int64_t, int64_t);
template ScoreResult<double> score_sequences<double>(const Weights<double>&, ForwardBatch<double>&, int64_t, int64_t);

}  // namespace mlpt::ref
