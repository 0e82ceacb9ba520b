// Page-aligned buffers, recycled between versions: a 1 GB weight set costs its page faults once,
// not on every step. The receiver lands versions in them; the sender cuts and packs what it sends
// in them. Thread-safe (the caller's release and the progress thread both return buffers).
#pragma once

#include <sys/mman.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <new>
#include <vector>

namespace mlpt::transport::ucx {

struct ReceiveBuffer {
  uint8_t* data = nullptr;
  size_t capacity = 0;
};

class ReceiveBufferPool {
 public:
  // `keep`: how many free buffers wait for reuse (one per version that may be in flight at once).
  explicit ReceiveBufferPool(size_t keep = 2) : keep_(keep) {}
  ~ReceiveBufferPool() {
    for (auto& b : free_) munmap(b.data, b.capacity);
  }

  ReceiveBuffer take(size_t size) {
    {
      std::lock_guard lock(mutex_);
      size_t best = free_.size();
      for (size_t i = 0; i < free_.size(); ++i)
        if (free_[i].capacity >= size && (best == free_.size() || free_[i].capacity < free_[best].capacity)) best = i;
      if (best != free_.size()) {
        ReceiveBuffer b = free_[best];
        free_.erase(free_.begin() + static_cast<std::ptrdiff_t>(best));
        return b;
      }
    }
    constexpr size_t kHuge = 2u << 20;
    ReceiveBuffer b;
    b.capacity = std::max<size_t>((size + kHuge - 1) / kHuge * kHuge, kHuge);
    void* p = mmap(nullptr, b.capacity, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    madvise(p, b.capacity, MADV_HUGEPAGE);  // fewer faults and TLB misses for GB-sized weights
    b.data = static_cast<uint8_t*>(p);
    return b;
  }

  void give_back(ReceiveBuffer b) {
    if (!b.data) return;
    std::lock_guard lock(mutex_);
    if (free_.size() < keep_) {
      free_.push_back(b);
    } else {
      munmap(b.data, b.capacity);
    }
  }

 private:
  size_t keep_;
  std::mutex mutex_;
  std::vector<ReceiveBuffer> free_;
};

}  // namespace mlpt::transport::ucx
