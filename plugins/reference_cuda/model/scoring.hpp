// Logprobs of given sequences (teacher forcing): token t of a sequence gets log p(x_t | x_<t), the
// first token of each sequence 0. The LM head runs in row blocks so a long batch never holds all
// its logits at once; on a vocabulary-parallel shard each TP rank its range's logits, the
// log-softmax and top candidates assembled over the TP group (model/parallel/vocab_parallel.hpp).
#pragma once

#include <utility>
#include <vector>

#include "model/model.hpp"

namespace mlpt::ref {

template <class T>
struct ScoreResult {
  std::vector<double> logprobs;  // per token
  // With top_n > 0: per token, the top_n most likely NEXT ids and their logprobs.
  std::vector<std::vector<std::pair<int32_t, double>>> top;
};

// On a pipeline stage before the last (which holds the LM head) every call is made alike and the
// result is empty.
template <class T>
ScoreResult<T> score_sequences(const Weights<T>& weights, ForwardBatch<T>& batch, int64_t valid_vocab,
                               int64_t top_n = 0);

}  // namespace mlpt::ref
