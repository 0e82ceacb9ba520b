// The flight recorder's ring entry (core/observe/stamped_slot.hpp): when the ring comes round while
// a writer is preempted inside an entry, the newer call waits for it rather than writing beside it,
// and an older call never overwrites a newer one. A run once lost one of 1024 kept calls that way.
#include "core/observe/stamped_slot.hpp"

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <string>
#include <thread>

using mlpt::observe::StampedSlot;

namespace {
struct Record {
  uint64_t call = 0;
  char text[40] = {};
};
Record record(uint64_t call) {
  Record r;
  r.call = call;
  const std::string t = "call " + std::to_string(call);
  t.copy(r.text, sizeof r.text - 1);
  return r;
}
}  // namespace

TEST_CASE("stamped slot: the newest call stays, an older one finding it there is dropped", "[observe]") {
  StampedSlot<Record> slot;
  Record out;
  CHECK_FALSE(slot.read(0, out));  // nothing written yet
  REQUIRE(slot.claim(5));
  CHECK_FALSE(slot.read(5, out));  // being written
  slot.publish(5, record(5));
  REQUIRE(slot.read(5, out));
  CHECK(out.call == 5);
  CHECK(std::string(out.text) == "call 5");
  CHECK_FALSE(slot.claim(3));  // older than the call held
  CHECK_FALSE(slot.claim(5));  // the same call twice
  REQUIRE(slot.claim(9));
  slot.publish(9, record(9));
  CHECK_FALSE(slot.read(5, out));  // lapped
  REQUIRE(slot.read(9, out));
  CHECK(out.call == 9);
}

TEST_CASE("stamped slot: a newer call waits for an older writer still inside, and then replaces it",
          "[observe]") {
  StampedSlot<Record> slot;
  REQUIRE(slot.claim(1));  // the older writer, preempted before it publishes
  std::atomic<bool> newer_claimed{false};
  std::thread newer([&] {
    const bool claimed = slot.claim(2);
    newer_claimed = true;
    if (claimed) slot.publish(2, record(2));
  });
  // A slot that let the newer call in now would have two writers at once.
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  CHECK_FALSE(newer_claimed.load());
  slot.publish(1, record(1));
  newer.join();
  CHECK(newer_claimed.load());
  Record out;
  CHECK_FALSE(slot.read(1, out));
  REQUIRE(slot.read(2, out));
  CHECK(out.call == 2);
  CHECK(std::string(out.text) == "call 2");
}

TEST_CASE("stamped slot: an older call that comes after a newer one has written is dropped, not written",
          "[observe]") {
  StampedSlot<Record> slot;
  REQUIRE(slot.claim(7));
  slot.publish(7, record(7));
  // Call 6 was handed its place first but reaches the slot last (its thread was preempted).
  CHECK_FALSE(slot.claim(6));
  Record out;
  REQUIRE(slot.read(7, out));
  CHECK(out.call == 7);
}
