#include "trainer/batch_part.hpp"

#include <algorithm>

namespace mlpt::ref {

BatchPart::BatchPart(const mlpt_train_batch& whole, int part, int parts) : batch_(whole) {
  if (parts <= 1) return;
  const int64_t n = static_cast<int64_t>(whole.num_sequences), tokens = whole.offsets[n];
  // The first sequence of part p: the first one starting at or after p/parts of the tokens, held
  // where every part before and after it can still have a sequence of its own.
  auto first_of = [&](int64_t p) -> int64_t {
    if (p >= parts) return n;
    const int64_t s = std::lower_bound(whole.offsets, whole.offsets + n, tokens * p / parts) - whole.offsets;
    return n >= parts ? std::clamp<int64_t>(s, p, n - (parts - p)) : s;
  };
  const int64_t first = first_of(part), end = std::max(first, first_of(part + 1));
  const int64_t begin = whole.offsets[first];
  first_token_ = begin;
  for (int64_t s = first; s <= end; ++s) offsets_.push_back(whole.offsets[s] - begin);
  batch_.num_sequences = static_cast<size_t>(end - first);
  batch_.offsets = offsets_.data();
  batch_.tokens = whole.tokens + begin;
  if (whole.loss_mask) batch_.loss_mask = whole.loss_mask + begin;
  if (whole.generation_logprobs) batch_.generation_logprobs = whole.generation_logprobs + begin;
  if (whole.advantages) batch_.advantages = whole.advantages + first;
  if (whole.truncated) batch_.truncated = whole.truncated + first;
  if (whole.routed_experts)
    batch_.routed_experts = whole.routed_experts + begin * whole.num_moe_layers * whole.experts_per_token;
}

}  // namespace mlpt::ref
