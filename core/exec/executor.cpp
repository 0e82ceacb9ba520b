#include "core/exec/executor.hpp"

namespace mlpt::exec {

WorkerPool::WorkerPool(int threads) {
  for (int i = 0; i < std::max(threads, 1); ++i) threads_.emplace_back([this] { loop(); });
}

WorkerPool::~WorkerPool() {
  {
    std::lock_guard l(mutex_);
    stopping_ = true;
  }
  ready_.notify_all();
  for (auto& t : threads_) t.join();
}

void WorkerPool::post(std::function<void()> task) {
  {
    std::lock_guard l(mutex_);
    tasks_.push_back(std::move(task));
  }
  ready_.notify_one();
}

void WorkerPool::loop() {
  for (;;) {
    std::function<void()> task;
    {
      std::unique_lock l(mutex_);
      ready_.wait(l, [&] { return stopping_ || !tasks_.empty(); });
      if (tasks_.empty()) return;  // stopping and drained
      task = std::move(tasks_.front());
      tasks_.pop_front();
    }
    task();
  }
}

void RunLoop::post(std::function<void()> task) {
  {
    std::lock_guard l(mutex_);
    tasks_.push_back(std::move(task));
  }
  ready_.notify_one();
}

void RunLoop::run() {
  for (;;) {
    std::function<void()> task;
    {
      std::unique_lock l(mutex_);
      ready_.wait(l, [&] { return quit_ || !tasks_.empty(); });
      if (quit_) return;
      task = std::move(tasks_.front());
      tasks_.pop_front();
    }
    task();
  }
}

void RunLoop::quit() {
  {
    std::lock_guard l(mutex_);
    quit_ = true;
  }
  ready_.notify_all();
}

}  // namespace mlpt::exec
