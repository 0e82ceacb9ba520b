// The process's core budget (backends/cpu/threads.hpp): a train step's lease has priority, an
// engine step gets the cores it leaves (at least one), and the whole budget once it ends.
#include <catch2/catch.hpp>

#include "backends/cpu/threads.hpp"

using namespace mlpt::ref::cpu;

TEST_CASE("an engine step gets what a running train step leaves, at least one thread") {
  const int cores = available_cores();
  REQUIRE(cores >= 1);
  {
    CoreLease alone(Phase::generate, cores + 5);
    CHECK(alone.threads() == cores);  // never more than the process may run on
  }
  {
    CoreLease train(Phase::train, cores);
    CHECK(train.threads() == cores);
    CoreLease engine(Phase::generate, cores);
    CHECK(engine.threads() == 1);  // not a second set of all cores
  }
  if (cores >= 2) {
    CoreLease train(Phase::train, cores - 1);
    CoreLease engine(Phase::generate, cores);
    CHECK(engine.threads() == 1);
    CHECK(train.threads() + engine.threads() == cores);
  }
  CoreLease after(Phase::generate, cores);  // the train steps ended: all of it again
  CHECK(after.threads() == cores);
  CHECK(CoreLease(Phase::train, 0).threads() == 1);
}
