// exec::call_on: a blocking call on another executor's thread while the coroutine's own executor
// goes on with other work (how an episode's grading leaves the rollout threads free). Real threads,
// one per pool, so a call that held the coroutine's thread would leave the other work waiting.
#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <stdexcept>
#include <thread>

#include "core/exec/coroutine.hpp"
#include "core/exec/executor.hpp"

using namespace mlpt;

namespace {

// Set once; waited for with a deadline, so a test that fails does not hang.
class Flag {
 public:
  void set() {
    std::lock_guard l(m_);
    set_ = true;
    cv_.notify_all();
  }
  bool wait(std::chrono::seconds limit) {
    std::unique_lock l(m_);
    return cv_.wait_for(l, limit, [&] { return set_; });
  }

 private:
  std::mutex m_;
  std::condition_variable cv_;
  bool set_ = false;
};

struct Outcome {
  int value = 0;
  std::string error;
  std::thread::id resumed_on;
  Flag done;
};

// Waits in `call` on `pool` for `other` work to run on `home`, then returns 42.
exec::Detached wait_for_other_work(exec::Executor& home, exec::Executor& pool, Flag& other_ran,
                                   Outcome& out) {
  co_await exec::resume_on(home);
  try {
    out.value = co_await exec::call_on(pool, home,
                                       [&] { return other_ran.wait(std::chrono::seconds(20)) ? 42 : -1; });
  } catch (const std::exception& e) {
    out.error = e.what();
  }
  out.resumed_on = std::this_thread::get_id();
  out.done.set();
}

exec::Detached throw_from_call(exec::Executor& home, exec::Executor& pool, Outcome& out) {
  co_await exec::resume_on(home);
  try {
    out.value =
        co_await exec::call_on(pool, home, []() -> int { throw std::runtime_error("the test run failed"); });
  } catch (const std::exception& e) {
    out.error = e.what();
  }
  out.done.set();
}

}  // namespace

TEST_CASE("call_on runs the call on the other pool while the coroutine's one thread does other work") {
  exec::WorkerPool home(1), grading(1);
  Flag other_ran;
  Outcome out;
  std::thread::id home_thread;
  wait_for_other_work(home, grading, other_ran, out);
  // Runs on home's only thread: it can run only while the call does not hold that thread.
  home.post([&] {
    home_thread = std::this_thread::get_id();
    other_ran.set();
  });
  REQUIRE(out.done.wait(std::chrono::seconds(30)));
  CHECK(out.error.empty());
  CHECK(out.value == 42);                // the call saw the other work run while it waited
  CHECK(out.resumed_on == home_thread);  // and the coroutine came back to its own executor
}

TEST_CASE("call_on hands the call's exception to the coroutine") {
  exec::WorkerPool home(1), grading(1);
  Outcome out;
  throw_from_call(home, grading, out);
  REQUIRE(out.done.wait(std::chrono::seconds(30)));
  CHECK(out.value == 0);
  CHECK(out.error == "the test run failed");
}
