// One expert-parallel rank's part of its replica's batch share under MoE parallel folding
// (trainer_group.hpp). The host gives every rank of a model-parallel group the same share (the ABI's
// data-parallel replica is the group whose ranks together hold every tensor, and the first replica
// publishes the weights), and the ep ranks of a stage each train a part of it: a contiguous run of
// whole sequences with about 1/parts of the tokens, every part holding at least one sequence when
// there are as many sequences as parts. The loss stays normalised by the global batch's token
// count, so the parts' gradients add up to the share's whatever the cut.
#pragma once

#include <cstdint>
#include <vector>

#include "mlpt/trainer.h"

namespace mlpt::ref {

class BatchPart {
 public:
  // Part `part` of `parts` of `whole`, a view into it (which must outlive this); parts = 1: whole.
  BatchPart(const mlpt_train_batch& whole, int part, int parts);
  BatchPart(const BatchPart&) = delete;
  BatchPart& operator=(const BatchPart&) = delete;

  const mlpt_train_batch* batch() const { return &batch_; }
  int64_t first_token() const { return first_token_; }  // where the part starts in `whole`

 private:
  std::vector<int64_t> offsets_;  // the part's, from 0
  int64_t first_token_ = 0;
  mlpt_train_batch batch_{};
};

// For the length of a call, args.batch is the rank's part (the replica's share again on return or
// throw), so the step reads one batch everywhere, the loss plan included.
template <class Args>
class BatchPartOf {
 public:
  BatchPartOf(Args& args, int part, int parts)
      : args_(args), replica_(args.batch), part_(*args.batch, part, parts) {
    args_.batch = part_.batch();
  }
  ~BatchPartOf() { args_.batch = replica_; }
  int64_t first_token() const { return part_.first_token(); }  // where the part starts in the share
  BatchPartOf(const BatchPartOf&) = delete;
  BatchPartOf& operator=(const BatchPartOf&) = delete;

 private:
  Args& args_;
  const mlpt_train_batch* replica_;
  BatchPart part_;
};

}  // namespace mlpt::ref
