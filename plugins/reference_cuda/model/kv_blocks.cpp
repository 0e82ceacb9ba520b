#include "model/kv_blocks.hpp"

#include <string>

#include "mlpt/sdk/error.hpp"

namespace mlpt::ref {

KvBlockLedger::KvBlockLedger(int64_t num_blocks, int64_t block_size)
    : num_blocks_(num_blocks), block_size_(block_size), holders_(static_cast<size_t>(num_blocks), 0) {
  if (block_size < 1) throw sdk::Error(MLPT_INVALID_ARGUMENT, "KV cache: block size must be at least 1");
  free_.reserve(static_cast<size_t>(num_blocks));
  for (int64_t b = num_blocks - 1; b >= 0; --b) free_.push_back(static_cast<int32_t>(b));
}

void KvBlockLedger::reserve(std::vector<int32_t>& blocks, int64_t tokens) {
  const int64_t need = (tokens + block_size_ - 1) / block_size_;
  std::lock_guard lk(mutex_);
  while (static_cast<int64_t>(blocks.size()) < need) {
    if (free_.empty())
      throw sdk::Error(MLPT_RESOURCE_EXHAUSTED,
                       "KV cache: " + std::to_string(need - static_cast<int64_t>(blocks.size())) + " more blocks of " +
                           std::to_string(block_size_) + " tokens needed, none free of " + std::to_string(num_blocks_) +
                           " (raise kv_cache_bytes or lower the batch)");
    blocks.push_back(free_.back());
    free_.pop_back();
    holders_[static_cast<size_t>(blocks.back())] = 1;
  }
}

void KvBlockLedger::share(const std::vector<int32_t>& from, size_t count, std::vector<int32_t>& to) {
  if (count > from.size())
    throw sdk::Error(MLPT_INTERNAL, "KV cache: sharing " + std::to_string(count) + " blocks of a sequence holding " +
                                        std::to_string(from.size()));
  std::lock_guard lk(mutex_);
  for (size_t i = 0; i < count; ++i) {
    ++holders_[static_cast<size_t>(from[i])];
    to.push_back(from[i]);
  }
}

void KvBlockLedger::release(std::vector<int32_t>& blocks) {
  std::lock_guard lk(mutex_);
  for (int32_t b : blocks)
    if (--holders_[static_cast<size_t>(b)] == 0) free_.push_back(b);
  blocks.clear();
}

int64_t KvBlockLedger::free_blocks() const {
  std::lock_guard lk(mutex_);
  return static_cast<int64_t>(free_.size());
}

int32_t KvBlockLedger::holders(int32_t block) const {
  std::lock_guard lk(mutex_);
  return holders_.at(static_cast<size_t>(block));
}

}  // namespace mlpt::ref
