// Where host work runs. An Executor runs posted tasks on its threads; rollouts are coroutines that
// hop onto one (core/exec/coroutine.hpp), so a few threads carry hundreds of episodes: an episode
// holds a thread only while it does host work (parsing, a harness step), never while the engine
// generates for it.
//   - WorkerPool: a fixed number of threads, for the run's rollouts and for blocking calls.
//   - RunLoop: the calling thread itself, until told to stop (a blocking call built from async parts).
#pragma once

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

// Tasks in order of posting, run by whoever calls drain(): it returns once close() was called and
// every task posted before it has run. Thread-safe.
class TaskQueue {
 public:
  void post(std::function<void()> task);
  void drain();
  void close();

 private:
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<std::function<void()>> tasks_;
  bool closed_ = false;
};

// `threads` threads running posted tasks. The destructor runs every task posted before it, then
// joins. A task must not throw.
class WorkerPool final : public Executor {
 public:
  explicit WorkerPool(int threads);
  ~WorkerPool() override;
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;
  void post(std::function<void()> task) override { tasks_.post(std::move(task)); }
  int threads() const { return static_cast<int>(threads_.size()); }

 private:
  TaskQueue tasks_;
  std::vector<std::thread> threads_;
};

// Runs posted tasks on the thread that calls run(), until quit() (from a task or any thread).
class RunLoop final : public Executor {
 public:
  void post(std::function<void()> task) override { tasks_.post(std::move(task)); }
  void run() { tasks_.drain(); }  // returns once quit() was called and the tasks before it ran
  void quit() { tasks_.close(); }

 private:
  TaskQueue tasks_;
};

}  // namespace mlpt::exec
