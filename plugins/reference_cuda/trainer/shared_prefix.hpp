// Shared prefixes of a train batch. The members of a GRPO group share a long prompt (the OpenHands
// system prompt and the task: about 8.4k of an 8.7k-token first turn), so the trainer computes it
// once per micro-batch and forks its GDN state, conv window and attention keys and values to the
// members (ForwardBatch::parents); the backward sums the members' gradients into it.
//
// Groups are runs of consecutive sequences. A group's prefix is what all its members start with:
// the same tokens and (when the batch replays routing) the same experts, ending before the first
// scored row of any member, so the output head and the loss only ever see a member's own rows.
// A sequence joins the run while that raises the tokens saved, (members − 1) × prefix.
#pragma once

#include <cstdint>
#include <vector>

#include "mlpt/trainer.h"

namespace mlpt::ref {

struct MicroBatch;

struct PrefixGroups {
  std::vector<size_t> group;    // per sequence: its group (groups are numbered in batch order)
  std::vector<int64_t> prefix;  // per group: the shared prefix length (0: nothing shared)
  // The tokens a micro-batch computes for sequence i when `first_of_group` (its group has no
  // earlier member in the micro-batch) or not: the prefix is computed once.
  int64_t cost(const mlpt_train_batch& b, size_t i, bool first_of_group) const;
};
PrefixGroups find_prefix_groups(const mlpt_train_batch& b);

// A micro-batch laid out as the model computes it: the prefix of every group with two or more
// members in the micro-batch is a segment of its own, each member continues it with the rest of
// its tokens (possibly none); other sequences are whole segments. Segments without a parent come
// first, then the continuations, so each kind is one kernel call per layer.
struct PackedMicroBatch {
  std::vector<int32_t> tokens;
  std::vector<int64_t> offsets{0};
  std::vector<int32_t> parents;  // ForwardBatch::parents (empty: nothing shared)
  std::vector<int16_t> replay;   // [row][layer][k] when the batch replays routing
  std::vector<int64_t> row;      // per token of the micro-batch (from mb.first_token): its row here
  int64_t rows() const { return offsets.back(); }
};
// `groups` NULL: every sequence whole, in order.
PackedMicroBatch pack_micro_batch(const mlpt_train_batch& b, const MicroBatch& mb, const PrefixGroups* groups);
// One sequence of two tokens (id 0) whose loss weight is zero: the micro-batch a rank runs under
// MoE parallel folding to take part in its expert-parallel ranks' dispatches (trainer_group.hpp)
// when its own share has fewer micro-batches. Its backward adds exact zeros.
PackedMicroBatch padding_micro_batch();

}  // namespace mlpt::ref
