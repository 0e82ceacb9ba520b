// One version of the weights from the trainer to an engine, plugin to plugin (transport.h): the
// trainer publishes through the sender endpoint and the engine fetches its own layout through the
// receiver endpoint. For a trainer, engine or transport older than ABI 1.2 the host takes that
// side's part itself (hands the trainer's export to `send`; receives the engine's layout and hands
// it to `load_weights`), passing pointers through: either way it never copies or keeps a weight.
#pragma once

#include <cstdint>

#include "core/components/instances.hpp"

namespace mlpt::refit {

// How long one version's transfer may take, at either end, before it fails: a refit at 397B moves
// hundreds of GB. Every refit of a run, in one process or many, waits this long.
inline constexpr int64_t kTransferTimeoutMs = 600000;

struct PublishResult {
  uint64_t version = 0;
  uint64_t bytes = 0;      // of the tensors published
  bool by_plugin = false;  // the trainer sent them itself (ABI 1.2)
};

// Publishes the version the trainer now holds through `sender`. Thread-safe against fetch on
// another thread (transports may need both ends at once).
PublishResult publish(components::Trainer& trainer, components::Transport& sender, int64_t timeout_ms);

// Has the engine (paused) fetch and load a version >= min_version through `receiver`; returns it.
uint64_t fetch(components::Engine& engine, components::Transport& receiver, uint64_t min_version, int64_t timeout_ms);

}  // namespace mlpt::refit
