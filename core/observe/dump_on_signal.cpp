#include "core/observe/dump_on_signal.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>

#include "core/observe/flight_recorder.hpp"

namespace mlpt::observe {
namespace {

std::atomic<int> g_request_fd{-1};

extern "C" void on_dump_signal(int) {
  const int saved = errno;
  const int fd = g_request_fd.load();
  const char request = 'd';
  if (fd >= 0) [[maybe_unused]]
    auto n = ::write(fd, &request, 1);
  errno = saved;
}

}  // namespace

DumpOnSignal::DumpOnSignal(std::function<void(const std::filesystem::path&)> dumped)
    : dumped_(std::move(dumped)) {
  if (::pipe2(pipe_, O_CLOEXEC) != 0) return;  // no live dumps; the others still work
  watcher_ = std::thread([this] {
    char request = 0;
    while (::read(pipe_[0], &request, 1) == 1 && request == 'd') {
      const auto path = FlightRecorder::instance().dump("SIGUSR1", "SIGUSR1: a live dump was asked for");
      if (dumped_) dumped_(path);
    }
  });
  g_request_fd.store(pipe_[1]);
  struct sigaction action {};
  action.sa_handler = on_dump_signal;
  action.sa_flags = SA_RESTART;
  sigemptyset(&action.sa_mask);
  sigaction(SIGUSR1, &action, &previous_);
}

DumpOnSignal::~DumpOnSignal() {
  if (watcher_.joinable()) {
    sigaction(SIGUSR1, &previous_, nullptr);
    g_request_fd.store(-1);
    const char quit = 'q';
    [[maybe_unused]] auto n = ::write(pipe_[1], &quit, 1);
    watcher_.join();
  }
  for (int fd : pipe_)
    if (fd >= 0) ::close(fd);
}

}  // namespace mlpt::observe
