// The coroutine pieces rollouts are written with: an episode reads as straight-line code, but each
// `co_await` gives its thread back (to the engine while it generates, to the pool between steps).
#pragma once

#include <coroutine>
#include <exception>
#include <optional>
#include <type_traits>
#include <utility>

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

// `co_await call_on(pool, home, call)`: runs the blocking `call()` on one of `pool`'s threads, then
// the coroutine continues on `home` with its result (or its exception). For a call that would
// otherwise hold one of `home`'s few threads for its whole length (grading a rollout's patch).
template <class Call>
auto call_on(Executor& pool, Executor& home, Call call) {
  using Result = std::invoke_result_t<Call&>;
  struct Awaiter {
    Executor* pool;
    Executor* home;
    Call call;
    std::optional<Result> result;
    std::exception_ptr error;
    bool await_ready() const noexcept { return false; }
    void await_suspend(std::coroutine_handle<> h) {
      pool->post([this, h] {
        try {
          result.emplace(call());
        } catch (...) {
          error = std::current_exception();
        }
        home->post([h] { h.resume(); });  // nothing touches *this after this line
      });
    }
    Result await_resume() {
      if (error) std::rethrow_exception(error);
      return std::move(*result);
    }
  };
  return Awaiter{&pool, &home, std::move(call), std::nullopt, nullptr};
}

}  // namespace mlpt::exec
