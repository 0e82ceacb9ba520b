#include "core/cli/interrupt.hpp"

#include <csignal>
#include <cstring>
#include <ctime>

#include <unistd.h>

namespace mlpt::cli {
namespace {

std::atomic<bool> g_interrupted{false};
std::atomic<int> g_signals{0};
std::atomic<bool> g_first_said{false};  // the first signal's message is written

// Only async-signal-safe calls here: write(2), nanosleep(2) and _exit(2).
void say(const char* text) { [[maybe_unused]] auto n = ::write(STDERR_FILENO, text, std::strlen(text)); }

extern "C" void on_signal(int) {
  if (g_signals.fetch_add(1) == 0) {
    g_interrupted.store(true);
    say("\nmlpt: interrupted; stopping (cancelling rollouts, sandbox commands and the train step, closing the "
        "result log). Press Ctrl-C again to quit at once.\n");
    g_first_said.store(true);
    return;
  }
  // Two signals at once run on two threads: let the first one's message out before quitting
  // (at most 0.2 s), so the user reads both.
  for (int i = 0; i < 200 && !g_first_said.load(); ++i) {
    timespec ms{0, 1000000};
    nanosleep(&ms, nullptr);
  }
  say("\nmlpt: second interrupt; quitting now (the result log is left open, checkpoints already written are kept).\n");
  ::_exit(130);
}

}  // namespace

const std::atomic<bool>& install_interrupt_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);  // one handler at a time per thread: the other signal waits, not nests
  sigaddset(&sa.sa_mask, SIGINT);
  sigaddset(&sa.sa_mask, SIGTERM);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  return g_interrupted;
}

}  // namespace mlpt::cli
