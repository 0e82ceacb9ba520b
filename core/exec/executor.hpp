// Where host work runs. An Executor runs posted tasks on its threads; rollouts are coroutines that
// hop onto one (core/exec/coroutine.hpp), so a few threads carry hundreds of episodes: an episode
// holds a thread only while it does host work (parsing, a harness step), never while the engine
// generates for it.
//   - WorkerPool: a fixed number of threads, for the run's rollouts and for blocking calls.
//   - RunLoop: the calling thread itself, until told to stop (a blocking call built from async parts).
#pragma once

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace mlpt::exec {

class Executor {
 public:
  virtual ~Executor() = default;
  // Queues `task` to run on one of the executor's threads. Thread-safe; never blocks for long.
  virtual void post(std::function<void()> task) = 0;
};

// `threads` threads running posted tasks in order of posting. The destructor runs every task
// posted before it, then joins. A task must not throw.
class WorkerPool final : public Executor {
 public:
  explicit WorkerPool(int threads);
  ~WorkerPool() override;
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;
  void post(std::function<void()> task) override;
  int threads() const { return static_cast<int>(threads_.size()); }

 private:
  void loop();
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<std::function<void()>> tasks_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

// Runs posted tasks on the thread that calls run(), until quit() (from a task or any thread).
class RunLoop final : public Executor {
 public:
  void post(std::function<void()> task) override;
  void run();   // returns once quit() was called and the task that called it (if any) returned
  void quit();  // thread-safe

 private:
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<std::function<void()>> tasks_;
  bool quit_ = false;
};

}  // namespace mlpt::exec
