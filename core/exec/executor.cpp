#include "core/exec/executor.hpp"

#include <algorithm>

namespace mlpt::exec {

void TaskQueue::post(std::function<void()> task) {
  {
    std::lock_guard l(mutex_);
    tasks_.push_back(std::move(task));
  }
  ready_.notify_one();
}

void TaskQueue::drain() {
  for (;;) {
    std::function<void()> task;
    {
      std::unique_lock l(mutex_);
      ready_.wait(l, [&] { return closed_ || !tasks_.empty(); });
      if (tasks_.empty()) return;  // closed and drained
      task = std::move(tasks_.front());
      tasks_.pop_front();
    }
    task();
  }
}

void TaskQueue::close() {
  {
    std::lock_guard l(mutex_);
    closed_ = true;
  }
  ready_.notify_all();
}

WorkerPool::WorkerPool(int threads) {
  for (int i = 0; i < std::max(threads, 1); ++i) threads_.emplace_back([this] { tasks_.drain(); });
}

WorkerPool::~WorkerPool() {
  tasks_.close();
  for (auto& t : threads_) t.join();
}

}  // namespace mlpt::exec
