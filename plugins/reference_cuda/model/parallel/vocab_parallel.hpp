// Vocabulary parallelism: under tensor parallelism the embedding and the LM head are split by rows
// (token ids) over the TP ranks, as Megatron splits them. A rank looks up the ids of its range
// (zeros for the others) and the TP group sums the rows; it computes the logits of its range only,
// and the log-softmax of a row is assembled from each rank's (max, Σ exp) over its range, so the
// whole vocabulary's logits are never gathered for scoring or training.
//
// The ranges are contiguous and as equal as the vocabulary allows (the first vocab % tp ranks one
// id more), so any vocabulary splits, with no padding rows added. Ids >= `valid` (the LM head's
// padding beyond the tokenizer, sampling.hpp) take no probability mass wherever they fall.
//
// Every call taking a Communicator is collective over the TP group (NULL or a group of one: the
// range is the whole vocabulary and nothing is exchanged); every rank gets the same bits. Groups
// of several ranks carry float32: T = double throws MLPT_UNIMPLEMENTED there, as sum_over does.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "model/parallel/model_parallel.hpp"

namespace mlpt::ref {

// Token ids [begin, end) of a rank's embedding and LM-head rows.
struct VocabRange {
  int64_t begin = 0, end = 0;
  int64_t count() const { return end - begin; }
  bool holds(int64_t id) const { return id >= begin && id < end; }
};

// Rank `rank` of `parts` over `vocab` ids.
VocabRange vocab_range(int64_t vocab, int parts, int rank);
// A shard's rows: its TP rank's range when the shard splits the vocabulary (vocab_parallel, tp > 1),
// else all of them.
VocabRange vocab_range(int64_t vocab, const ModelShard& shard);

// For `rows` rows of this rank's logits `logits` ([rows, range.count()], ids range.begin + j):
// lse[i] = log Σ_{v < valid} exp(logit[i, v]) over every rank's range, and logprob[i] = logit[i,
// targets[i]] − lse[i]. A target must be < valid.
template <class T>
void vocab_log_softmax(Communicator* tensor, const VocabRange& range, int64_t valid, int64_t rows,
                       const T* logits, const int32_t* targets, double* lse, double* logprob);

// d loss / d logits of this rank's range for loss = Σ_i coef[i] · logprob[i]: coef[i] ·
// (onehot(targets[i]) − softmax), written over dlogits ([rows, range.count()], zero beyond valid).
// Local: each rank its own slice, from the lse vocab_log_softmax gave.
template <class T>
void vocab_log_softmax_backward(const VocabRange& range, int64_t valid, int64_t rows, const T* logits,
                                const int32_t* targets, const double* lse, const double* coef, T* dlogits);

// The n most likely ids < valid of each row with their log-softmax values (logit − lse[i]), most
// likely first, ties to the lower id (top_logprobs' order): each rank's own n candidates gathered,
// n · tp values a row instead of the vocabulary.
std::vector<std::vector<std::pair<int32_t, double>>> vocab_top_logprobs(Communicator* tensor,
                                                                        const VocabRange& range,
                                                                        int64_t valid, int64_t rows,
                                                                        const float* logits,
                                                                        const double* lse, int64_t n);

// The whole rows [rows, vocab] from every rank's slice (rank r's range of vocab_range(vocab, tp,
// r)): what sampling needs to draw exactly as one rank draws (its walk over the ids in order).
std::vector<float> gather_vocab_rows(Communicator* tensor, int64_t vocab, int64_t rows, const float* logits);

}  // namespace mlpt::ref
