// The coroutine pieces rollouts are written with: an episode reads as straight-line code, but each
// `co_await` gives its thread back (to the engine while it generates, to the pool between steps).
#pragma once

#include <coroutine>
#include <exception>

#include "core/exec/executor.hpp"

namespace mlpt::exec {

// A coroutine that starts running at once, on the caller's thread, and frees its frame when its body
// returns. Its body must catch everything: what escapes terminates the process.
struct Detached {
  struct promise_type {
    Detached get_return_object() noexcept { return {}; }
    std::suspend_never initial_suspend() noexcept { return {}; }
    std::suspend_never final_suspend() noexcept { return {}; }
    void return_void() noexcept {}
    void unhandled_exception() noexcept { std::terminate(); }
  };
};

// `co_await resume_on(executor)`: the coroutine continues on one of the executor's threads.
inline auto resume_on(Executor& executor) {
  struct Awaiter {
    Executor* executor;
    bool await_ready() const noexcept { return false; }
    void await_suspend(std::coroutine_handle<> h) const { executor->post([h] { h.resume(); }); }
    void await_resume() const noexcept {}
  };
  return Awaiter{&executor};
}

}  // namespace mlpt::exec
