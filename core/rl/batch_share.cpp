#include "core/rl/batch_share.hpp"

#include <algorithm>

#include "core/error.hpp"

namespace mlpt::rl {

int64_t global_loss_tokens(const mlpt_train_batch& b) {
  int64_t n = 0;
  for (size_t i = 0; i < b.num_sequences; ++i) {
    if (b.truncated && b.truncated[i]) continue;
    for (int64_t t = b.offsets[i] + 1; t < b.offsets[i + 1]; ++t) n += b.loss_mask[t] != 0;
  }
  return n;
}

ShareRange share_range(const mlpt_train_batch& b, int rank, int ranks) {
  if (ranks < 1 || rank < 0 || rank >= ranks)
    throw Error(MLPT_INVALID_ARGUMENT, "batch share: rank " + std::to_string(rank) + " of " + std::to_string(ranks));
  const size_t n = b.num_sequences;
  const double total = static_cast<double>(b.offsets[n]);
  // Block k starts at the sequence boundary nearest to k/ranks of the tokens, at least k sequences
  // in and leaving one for each later block (so no block is empty while sequences last).
  auto start = [&](int k) {
    if (k == 0) return size_t{0};
    if (k == ranks) return n;
    const double target = total * k / ranks;
    size_t s = 0;
    while (s < n && static_cast<double>(b.offsets[s]) < target) ++s;
    if (s > 0 && target - static_cast<double>(b.offsets[s - 1]) < static_cast<double>(b.offsets[s]) - target) --s;
    const size_t lowest = std::min(n, static_cast<size_t>(k)), highest = n >= static_cast<size_t>(ranks) ? n - (ranks - k) : n;
    return std::clamp(s, lowest, std::max(lowest, highest));
  };
  return ShareRange{start(rank), std::max(start(rank), start(rank + 1))};
}

BatchShare::BatchShare(const mlpt_train_batch& whole, int rank, int ranks) {
  const ShareRange r = share_range(whole, rank, ranks);
  const int64_t begin = whole.offsets[r.first], end = whole.offsets[r.end];
  const int64_t routes = whole.routed_experts ? whole.num_moe_layers * whole.experts_per_token : 0;
  for (size_t s = r.first; s <= r.end; ++s) offsets_.push_back(whole.offsets[s] - begin);
  tokens_.assign(whole.tokens + begin, whole.tokens + end);
  loss_mask_.assign(whole.loss_mask + begin, whole.loss_mask + end);
  if (whole.generation_logprobs) logprobs_.assign(whole.generation_logprobs + begin, whole.generation_logprobs + end);
  if (whole.advantages) advantages_.assign(whole.advantages + r.first, whole.advantages + r.end);
  if (whole.truncated) truncated_.assign(whole.truncated + r.first, whole.truncated + r.end);
  if (routes) routed_.assign(whole.routed_experts + begin * routes, whole.routed_experts + end * routes);
  batch_ = whole;
  batch_.num_sequences = r.end - r.first;
  batch_.offsets = offsets_.data();
  batch_.tokens = tokens_.data();
  batch_.loss_mask = loss_mask_.data();
  batch_.generation_logprobs = whole.generation_logprobs ? logprobs_.data() : nullptr;
  batch_.advantages = whole.advantages ? advantages_.data() : nullptr;
  batch_.truncated = whole.truncated ? truncated_.data() : nullptr;
  batch_.routed_experts = routes ? routed_.data() : nullptr;
}

}  // namespace mlpt::rl
