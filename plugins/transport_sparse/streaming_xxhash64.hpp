// XXH64 fed piece by piece: the same value as sdk::xxhash64 over the concatenated pieces. The sparse
// refit hashes each 64 KiB chunk of a tensor right after comparing (sender) or applying (receiver)
// it, while the chunk is in cache, instead of a second pass over the whole tensor.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "mlpt/sdk/xxhash64.hpp"

namespace mlpt::sparse_refit {

class StreamingXxhash64 {
 public:
  explicit StreamingXxhash64(uint64_t seed = 0)
      : seed_(seed),
        v_{seed + sdk::xxhash64_detail::P1 + sdk::xxhash64_detail::P2, seed + sdk::xxhash64_detail::P2, seed,
           seed - sdk::xxhash64_detail::P1} {}

  void update(const void* data, size_t size) {
    const auto* p = static_cast<const unsigned char*>(data);
    total_ += size;
    if (pending_ > 0) {  // complete the stripe a previous piece left unfinished
      const size_t take = size < 32 - pending_ ? size : 32 - pending_;
      std::memcpy(stripe_ + pending_, p, take);
      pending_ += take, p += take, size -= take;
      if (pending_ < 32) return;
      consume(stripe_);
      pending_ = 0;
    }
    for (; size >= 32; p += 32, size -= 32) consume(p);
    std::memcpy(stripe_, p, size);
    pending_ = size;
  }

  uint64_t digest() const {
    using namespace sdk::xxhash64_detail;
    uint64_t h;
    if (total_ >= 32) {
      h = rotl(v_[0], 1) + rotl(v_[1], 7) + rotl(v_[2], 12) + rotl(v_[3], 18);
      for (uint64_t v : v_) h = merge(h, v);
    } else {
      h = seed_ + P5;
    }
    return finish(h + total_, stripe_, stripe_ + pending_);
  }

 private:
  void consume(const unsigned char* p) {
    using namespace sdk::xxhash64_detail;
    v_[0] = round(v_[0], read64(p));
    v_[1] = round(v_[1], read64(p + 8));
    v_[2] = round(v_[2], read64(p + 16));
    v_[3] = round(v_[3], read64(p + 24));
  }

  uint64_t seed_;
  uint64_t v_[4];
  uint64_t total_ = 0;
  unsigned char stripe_[32]{};
  size_t pending_ = 0;
};

}  // namespace mlpt::sparse_refit
