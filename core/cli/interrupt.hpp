// The run's one cancellation source: Ctrl-C (SIGINT) and SIGTERM set a flag that the host services'
// is_cancelled returns, so every plugin call in flight (a sandbox command, a generation, a train
// step) stops, and the core's loop closes the result log. The first signal is acknowledged on the
// terminal at once; a second one quits immediately (the run's files may then be left open).
#pragma once

#include <atomic>

namespace mlpt::cli {

// Installs the handlers (idempotent) and returns the flag they set.
const std::atomic<bool>& install_interrupt_handlers();

}  // namespace mlpt::cli
