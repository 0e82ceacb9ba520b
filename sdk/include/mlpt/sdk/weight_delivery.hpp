// One received version of the weights, loaded and given back to the transport however the load
// ends (transport.h, Receive: every receive is released once). The rule of engine.h fetch_weights,
// written once for the SDK's engines and for the host's relays.
#pragma once

#include <cstdint>
#include <utility>

namespace mlpt::sdk {

// Calls `load()`, then `release(version)`, also when the load throws (its error is the one
// rethrown: a failing release then says less than the load's error).
template <class Load, class Release>
void load_then_release(uint64_t version, Load&& load, Release&& release) {
  try {
    std::forward<Load>(load)();
  } catch (...) {
    try {
      release(version);
    } catch (...) {  // the load's error says more
    }
    throw;
  }
  release(version);
}

}  // namespace mlpt::sdk
