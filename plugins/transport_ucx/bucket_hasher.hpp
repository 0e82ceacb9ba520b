// Checks landed buckets off the receiver's progress thread. Between processes on one machine UCX
// copies each bucket inside the receiver's progress call (CMA), so a checksum computed there holds
// up the copy of the next bucket: each bucket cost its copy plus its hash, and a checked refit ran
// at half the rate of an unchecked one. On a thread of its own, the hash of bucket i runs while
// bucket i+1 is copied.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace mlpt::transport::ucx {

class BucketHasher {
 public:
  // One bucket to hash. `keep` holds the memory at `data` (and so keeps `owner`, the part it
  // belongs to, from being freed and its address reused) until the result has been taken.
  struct Job {
    std::shared_ptr<const void> keep;
    const void* owner = nullptr;
    uint32_t bucket = 0;
    const uint8_t* data = nullptr;
    size_t size = 0;
  };
  struct Result {
    std::shared_ptr<const void> keep;
    const void* owner = nullptr;
    uint32_t bucket = 0;
    uint64_t hash = 0;  // xxhash64 of the bucket's bytes
  };

  BucketHasher();
  ~BucketHasher();  // stops the thread; jobs not yet hashed are dropped
  BucketHasher(const BucketHasher&) = delete;
  BucketHasher& operator=(const BucketHasher&) = delete;

  void submit(Job job);
  // Appends the results finished since the last call to `out`.
  void take(std::vector<Result>& out);

 private:
  void run();

  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<Job> jobs_;
  std::vector<Result> done_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace mlpt::transport::ucx
