// The in-process transport through the real plugin: zero-copy hand-over, version order, the release
// rules that make zero-copy safe, and timeouts.
#include <catch2/catch.hpp>

#include <atomic>
#include <thread>

#include "transport_support.hpp"

using namespace transport_test;

namespace {

mlpt_error_code code_of(const std::function<void()>& f, std::string* message = nullptr) {
  try {
    f();
  } catch (const mlpt::Error& e) {
    if (message) *message = e.what();
    return e.code();
  }
  return MLPT_OK;
}

}  // namespace

TEST_CASE("inprocess: a receiver sees the sender's own memory (zero-copy)") {
  Loaded t("inprocess");
  CHECK(t.caps()->zero_copy == 1);
  Endpoint tx(t, MLPT_TRANSPORT_SENDER, R"({"receivers": 1})", "zero-copy");
  Endpoint rx(t, MLPT_TRANSPORT_RECEIVER, "{}", "zero-copy");
  auto set = mixed_tensors(1);
  tx.send(1, set.views, 1000);
  Received r = rx.receive(1, 1000);
  REQUIRE(r.version == 1);
  REQUIRE(r.count == set.views.size());
  for (size_t i = 0; i < r.count; ++i) {
    CHECK(r.tensors[i].tensor.data == set.views[i].tensor.data);  // pointer identity, not a copy
    CHECK(std::string(r.tensors[i].name.data, r.tensors[i].name.size) == set.names[i]);
    CHECK(std::vector<int64_t>(r.tensors[i].tensor.shape, r.tensors[i].tensor.shape + r.tensors[i].tensor.ndim) == set.shapes[i]);
    CHECK(r.tensors[i].tensor.dtype.code == set.dtypes[i].code);
  }
  rx.release(1);
}

TEST_CASE("inprocess: versions strictly increase and receive returns the newest >= min_version") {
  Loaded t("inprocess");
  Endpoint tx(t, MLPT_TRANSPORT_SENDER, "{}", "versions");
  Endpoint rx(t, MLPT_TRANSPORT_RECEIVER, "{}", "versions");
  auto a = mixed_tensors(1), b = mixed_tensors(2);
  tx.send(3, a.views, 1000);
  std::string msg;
  CHECK(code_of([&] { tx.send(3, b.views, 1000); }, &msg) == MLPT_INVALID_ARGUMENT);
  CHECK_THAT(msg, Catch::Contains("not greater than the previous send's 3"));
  CHECK(code_of([&] { tx.send(2, b.views, 1000); }) == MLPT_INVALID_ARGUMENT);
  tx.send(7, b.views, 1000);
  Received r = rx.receive(1, 1000);  // min 1, but the newest is 7
  CHECK(r.version == 7);
  CHECK(r.tensors[0].tensor.data == b.views[0].tensor.data);
  rx.release(7);
  CHECK(code_of([&] { rx.receive(8, 50); }, &msg) == MLPT_DEADLINE_EXCEEDED);
  CHECK_THAT(msg, Catch::Contains("no version >= 8"));
}

TEST_CASE("inprocess: release rules") {
  Loaded t("inprocess");
  Endpoint tx(t, MLPT_TRANSPORT_SENDER, "{}", "release");
  Endpoint rx(t, MLPT_TRANSPORT_RECEIVER, "{}", "release");
  auto a = mixed_tensors(1), b = mixed_tensors(2);
  CHECK(code_of([&] { rx.release(1); }) == MLPT_FAILED_PRECONDITION);  // holds nothing
  tx.send(1, a.views, 1000);
  rx.receive(1, 1000);
  std::string msg;
  CHECK(code_of([&] { rx.receive(1, 10); }, &msg) == MLPT_FAILED_PRECONDITION);  // must release first
  CHECK_THAT(msg, Catch::Contains("still holds version 1"));
  CHECK(code_of([&] { rx.release(2); }) == MLPT_INVALID_ARGUMENT);  // not the one it holds

  // While version 1 is held, the sender may not publish 2 (the trainer would overwrite memory the
  // engine still reads): it times out naming the holder ...
  CHECK(code_of([&] { tx.send(2, b.views, 100); }, &msg) == MLPT_DEADLINE_EXCEEDED);
  CHECK_THAT(msg, Catch::Contains("receiver #0 of group 'release'") && Catch::Contains("did not release version 1"));
  // ... and goes ahead the moment it is released, not before.
  std::atomic<bool> released{false};
  std::thread engine([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    released = true;
    rx.release(1);
  });
  tx.send(3, b.views, 5000);
  CHECK(released.load());
  engine.join();
  Received r = rx.receive(3, 1000);
  CHECK(r.version == 3);
  rx.release(3);
}

TEST_CASE("inprocess: send waits for every expected receiver, and a gone sender is UNAVAILABLE") {
  Loaded t("inprocess");
  auto a = mixed_tensors(1);
  std::string msg;
  {
    Endpoint tx(t, MLPT_TRANSPORT_SENDER, R"({"receivers": 2, "timeout_ms": 100})", "two");
    Endpoint rx0(t, MLPT_TRANSPORT_RECEIVER, "{}", "two");
    CHECK(code_of([&] { tx.send(1, a.views, 100); }, &msg) == MLPT_DEADLINE_EXCEEDED);
    CHECK_THAT(msg, Catch::Contains("1 of 2 receivers attached"));
    Endpoint rx1(t, MLPT_TRANSPORT_RECEIVER, "{}", "two");
    CHECK(code_of([&] { Endpoint third(t, MLPT_TRANSPORT_RECEIVER, "{}", "two"); }) == MLPT_RESOURCE_EXHAUSTED);
    tx.send(2, a.views, 1000);
    CHECK(rx0.receive(1, 1000).tensors[0].tensor.data == a.views[0].tensor.data);
    CHECK(rx1.receive(1, 1000).version == 2);
    rx0.release(2);
    rx1.release(2);
  }
  Endpoint late(t, MLPT_TRANSPORT_RECEIVER, "{}", "two");
  CHECK(code_of([&] { late.receive(1, 1000); }, &msg) == MLPT_UNAVAILABLE);
  CHECK_THAT(msg, Catch::Contains("went away"));
}

TEST_CASE("inprocess: bad configs and roles are refused plainly") {
  Loaded t("inprocess");
  std::string msg;
  CHECK(code_of([&] { Endpoint e(t, MLPT_TRANSPORT_SENDER, R"({"recievers": 2})", "bad"); }, &msg) == MLPT_INVALID_ARGUMENT);
  CHECK_THAT(msg, Catch::Contains("unknown key 'recievers'"));
  CHECK(code_of([&] { Endpoint e(t, MLPT_TRANSPORT_SENDER, R"({"receivers": 0})", "bad"); }) == MLPT_INVALID_ARGUMENT);
  Endpoint tx(t, MLPT_TRANSPORT_SENDER, "{}", "bad");
  CHECK(code_of([&] { Endpoint e(t, MLPT_TRANSPORT_SENDER, "{}", "bad"); }) == MLPT_ALREADY_EXISTS);
  CHECK(code_of([&] { tx.receive(1, 0); }) == MLPT_FAILED_PRECONDITION);
}
