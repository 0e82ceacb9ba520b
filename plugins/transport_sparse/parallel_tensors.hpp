// Work over a version's tensors on several threads: hashing, encoding and applying a sparse refit
// each read the whole model, which one core does at a fraction of the memory's speed. Tensors are
// taken in turn from a shared counter, so one large tensor does not hold up the rest; an exception
// on any thread is rethrown on the caller's (the first one, after every thread stopped).
#pragma once

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace mlpt::sparse_refit {

// Threads used for `count` tensors: the machine's cores, at most 8 (memory bandwidth is shared) and
// at most one per tensor.
inline size_t tensor_threads(size_t count) {
  const size_t cores = std::max<unsigned>(1, std::thread::hardware_concurrency());
  return std::max<size_t>(1, std::min({cores, size_t{8}, count}));
}

// Calls f(i) for every i in [0, count), each once, on up to tensor_threads(count) threads.
template <class F>
void for_each_tensor(size_t count, F&& f) {
  const size_t threads = tensor_threads(count);
  if (threads <= 1) {
    for (size_t i = 0; i < count; ++i) f(i);
    return;
  }
  std::atomic<size_t> next{0};
  std::exception_ptr error;
  std::mutex error_mutex;
  auto work = [&] {
    for (size_t i; (i = next.fetch_add(1)) < count;) {
      try {
        f(i);
      } catch (...) {
        std::lock_guard lock(error_mutex);
        if (!error) error = std::current_exception();
        next.store(count);  // the others stop at their next tensor
      }
    }
  };
  std::vector<std::thread> pool;
  for (size_t t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
  if (error) std::rethrow_exception(error);
}

}  // namespace mlpt::sparse_refit
