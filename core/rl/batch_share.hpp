// A trainer rank's share of the step's global batch (data parallel, ABI 1.2): a contiguous run of
// whole sequences with about 1/ranks of the tokens, and N_tok of the whole batch that every rank
// normalises by (docs/benchmark.md §3), so the ranks' gradients add up to the one-rank gradient.
#pragma once

#include <cstdint>
#include <vector>

#include "mlpt/trainer.h"

namespace mlpt::rl {

// Trainable tokens (loss_mask 1, not the first token of a sequence) of the sequences not truncated.
int64_t global_loss_tokens(const mlpt_train_batch& batch);

// The sequences [first, end) of `ranks` near-equal token blocks that group rank `rank` trains.
// Every rank gets at least one sequence when there are as many sequences as ranks.
struct ShareRange {
  size_t first = 0, end = 0;
};
ShareRange share_range(const mlpt_train_batch& batch, int rank, int ranks);

class BatchShare {
 public:
  // Copies rank `rank`'s sequences out of `whole` (which need not outlive it).
  BatchShare(const mlpt_train_batch& whole, int rank, int ranks);
  BatchShare(const BatchShare&) = delete;
  BatchShare& operator=(const BatchShare&) = delete;

  const mlpt_train_batch* abi() const { return &batch_; }

 private:
  std::vector<int64_t> offsets_;
  std::vector<int32_t> tokens_;
  std::vector<uint8_t> loss_mask_, truncated_;
  std::vector<float> logprobs_, advantages_;
  std::vector<int16_t> routed_;
  mlpt_train_batch batch_{};
};

}  // namespace mlpt::rl
