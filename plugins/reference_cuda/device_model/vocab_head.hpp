// The device model's LM head over a vocabulary split by token ids across the tensor-parallel ranks
// (model/parallel/vocab_parallel.hpp's ranges, which the fp32 model and the shards use): each rank
// computes the logits of its range only, and a row's log-softmax is assembled from every rank's
// (max, Σ exp) over its range and the target's logit from the rank that holds it, as
// vocab_log_softmax does on the host, so the vocabulary's logits are never gathered for scoring or
// training. Sampling, which walks the whole row in id order, gathers the sampled rows whole.
//
// Ids >= `valid` (the LM head's padding) take no probability mass wherever they fall, a rank whose
// range is all padding included. With the vocabulary whole (one rank, or a shard that keeps it
// whole) every call is the one-rank op with nothing exchanged.
//
// The group is the tensor-parallel group in the backend's memory; every call taking it is
// collective over it.
#pragma once

#include <cstdint>
#include <vector>

#include "model/config.hpp"
#include "model/parallel/communicator.hpp"
#include "model/parallel/vocab_parallel.hpp"
#include "ops/ops.hpp"

namespace mlpt::ref::dev {

// The LM head's rows at a time in training and scoring (trainer/device_trainer.cpp): the logits
// never exist for a whole micro-batch, only for this many rows (device_model/step_memory.hpp).
constexpr int64_t kHeadBlockRows = 1024;

// Ids as a rank of `range` indexes its embedding and LM-head rows: id − begin inside the range, −1
// outside (a zero embedding row, no onehot in the head's gradient). Host in, host out.
std::vector<int32_t> vocab_local_ids(const VocabRange& range, const std::vector<int32_t>& ids);

// The head's working memory, kept across calls by a caller that runs it often (the engine's steps).
struct VocabScratch {
  Buffer stats, gathered, wide, whole;
};

class VocabHead {
 public:
  // The LM head of shard config `c` (its ModelShard says whether and how the vocabulary is split);
  // `tensor` the shard's TP group (NULL for one rank), `valid` the real ids (<= vocab_size);
  // `scratch` the caller's working memory, or NULL for the head's own.
  VocabHead(const ModelConfig& c, Communicator* tensor, int64_t valid, VocabScratch* scratch = nullptr);
  VocabHead(const VocabHead&) = delete;
  VocabHead& operator=(const VocabHead&) = delete;

  const VocabRange& range() const { return range_; }
  int64_t width() const { return range_.count(); }  // the LM head's rows (logits' columns) here
  bool split() const { return group_ != nullptr; }

  // logprob[r] = log_softmax(row r over every rank's real ids)[target r] and lse[r] its log-sum-exp,
  // from this rank's logits [rows, width()] and targets given by vocab_local_ids. Collective.
  void logprobs(Ops& ops, int64_t rows, const float* logits, const int32_t* local_targets, float* logprob,
                float* lse);
  // d Σ_r coef[r] · logprob[r] / d logits of this rank's columns (bf16; lse from logprobs). Local.
  void logprobs_backward(Ops& ops, int64_t rows, const float* logits, const float* lse,
                         const int32_t* local_targets, const float* coef, bf16* dlogits);
  // The input gradient d hidden [n] (bf16), this rank's columns' share, summed over the group in
  // fp32 and rounded once. Collective.
  void sum_input_gradient(Ops& ops, bf16* d_hidden, int64_t n);
  // The whole rows [rows, vocab_size] from every rank's logits [rows, width()]: what the sampler
  // needs to draw as one rank draws. Returns `logits` itself when the vocabulary is whole. Collective.
  const float* whole_rows(Ops& ops, int64_t rows, const float* logits);

 private:
  VocabRange range_;
  int64_t vocab_, valid_;
  Communicator* group_;  // NULL when the vocabulary is whole here
  VocabScratch own_;
  VocabScratch& s_;
};

}  // namespace mlpt::ref::dev
