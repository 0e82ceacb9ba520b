#include "bucket_hasher.hpp"

#include "mlpt/sdk/xxhash64.hpp"

namespace mlpt::transport::ucx {

BucketHasher::BucketHasher() : thread_([this] { run(); }) {}

BucketHasher::~BucketHasher() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void BucketHasher::submit(Job job) {
  {
    std::lock_guard lock(mutex_);
    jobs_.push_back(std::move(job));
  }
  cv_.notify_one();
}

void BucketHasher::take(std::vector<Result>& out) {
  std::lock_guard lock(mutex_);
  for (auto& r : done_) out.push_back(std::move(r));
  done_.clear();
}

void BucketHasher::run() {
  std::unique_lock lock(mutex_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || !jobs_.empty(); });
    if (stop_) return;
    Job job = std::move(jobs_.front());
    jobs_.pop_front();
    lock.unlock();
    const uint64_t hash = sdk::xxhash64(job.data, job.size);
    lock.lock();
    done_.push_back(Result{std::move(job.keep), job.owner, job.bucket, hash});
  }
}

}  // namespace mlpt::transport::ucx
