// The bookkeeping of a paged KV cache (§4): which blocks are free and how many sequences hold each
// one. A copy of a sequence (the prefix cache, a group's members continuing a shared prompt, a
// session's turn) shares the blocks its source has filled to the end: positions below a sequence's
// length are never written again, so a full block is read-only for every holder. Only the last,
// partly filled block is copied. The memory itself is the backend's (the CUDA backend's
// KvBlockPool, device_model/generate.hpp). Thread-safe: sequences die on any thread.
#pragma once

#include <cstdint>
#include <mutex>
#include <vector>

namespace mlpt::ref {

class KvBlockLedger {
 public:
  KvBlockLedger(int64_t num_blocks, int64_t block_size);
  int64_t num_blocks() const { return num_blocks_; }
  int64_t block_size() const { return block_size_; }

  // Appends free blocks to `blocks` (each then held once) until they cover `tokens` positions.
  // Throws MLPT_RESOURCE_EXHAUSTED naming the shortfall when none is left; the blocks taken so far
  // stay in `blocks` (the caller releases them with the sequence).
  void reserve(std::vector<int32_t>& blocks, int64_t tokens);
  // Appends the first `count` blocks of `from` to `to`, each held once more.
  void share(const std::vector<int32_t>& from, size_t count, std::vector<int32_t>& to);
  // Drops one hold of every block in `blocks` (a block with none left is free again); empties it.
  void release(std::vector<int32_t>& blocks);

  int64_t free_blocks() const;
  int32_t holders(int32_t block) const;

 private:
  int64_t num_blocks_, block_size_;
  mutable std::mutex mutex_;
  std::vector<int32_t> free_;     // lowest ids handed out first
  std::vector<int32_t> holders_;  // per block
};

}  // namespace mlpt::ref
