#include "core/run/crash_guard.hpp"

#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstring>

#include "core/error.hpp"
#include "core/mllog/keys.hpp"
#include "core/observe/flight_recorder.hpp"
#include "core/plugin/call_scope.hpp"

namespace mlpt::run {
namespace {

constexpr int kSignals[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT};

// Everything the handler needs, prepared before any crash; the handler only reads it.
struct State {
  int fd = -1;
  std::string log_path;
  // The run_start and run_stop lines split where time_ms and samples_count go.
  std::string start_before_time, start_after_time;
  std::string stop_before_time, stop_before_samples, stop_after_samples;
  std::atomic<bool> started{false}, closed{false};
  std::atomic<int64_t> samples{0};
  // The last checkpoint's description; two buffers so a writer never changes the one in use.
  char checkpoint[2][1024] = {};
  std::atomic<int> checkpoint_index{-1};
  struct sigaction previous[std::size(kSignals)] = {};
};

State* g_state = nullptr;

// ---- Async-signal-safe output -------------------------------------------------------------------

void put(int fd, const char* text, size_t size) {
  while (size > 0) {
    ssize_t n = ::write(fd, text, size);
    if (n <= 0) return;
    text += n, size -= static_cast<size_t>(n);
  }
}
void put(int fd, const char* text) { put(fd, text, std::strlen(text)); }
void put(int fd, const std::string& text) { put(fd, text.data(), text.size()); }
void put_integer(int fd, int64_t v) {
  char digits[24];
  size_t n = 0;
  const bool negative = v < 0;
  uint64_t u = negative ? 0 - static_cast<uint64_t>(v) : static_cast<uint64_t>(v);
  do digits[n++] = static_cast<char>('0' + u % 10); while ((u /= 10) != 0);
  if (negative) digits[n++] = '-';
  char text[24];
  for (size_t i = 0; i < n; ++i) text[i] = digits[n - 1 - i];
  put(fd, text, n);
}

const char* signal_name(int sig) {
  switch (sig) {
    case SIGSEGV: return "SIGSEGV, segmentation fault";
    case SIGBUS: return "SIGBUS, bus error";
    case SIGILL: return "SIGILL, illegal instruction";
    case SIGFPE: return "SIGFPE, arithmetic exception";
    case SIGABRT: return "SIGABRT, abort";
    default: return "a fatal signal";
  }
}

const char* short_signal_name(int sig) {  // names a flight recorder dump
  switch (sig) {
    case SIGSEGV: return "crash-SIGSEGV";
    case SIGBUS: return "crash-SIGBUS";
    case SIGILL: return "crash-SIGILL";
    case SIGFPE: return "crash-SIGFPE";
    case SIGABRT: return "crash-SIGABRT";
    default: return "crash";
  }
}

extern "C" void on_crash(int sig, siginfo_t*, void*) {
  static std::atomic_flag entered = ATOMIC_FLAG_INIT;
  if (entered.test_and_set()) {  // a second thread crashing: the first one ends the process
    for (;;) ::pause();
  }
  State& s = *g_state;
  timespec now{};
  clock_gettime(CLOCK_REALTIME, &now);
  const int64_t ms = static_cast<int64_t>(now.tv_sec) * 1000 + now.tv_nsec / 1000000;
  const bool close_log = s.fd >= 0 && !s.closed.exchange(true);
  if (close_log) {
    if (!s.started.load()) put(s.fd, s.start_before_time), put_integer(s.fd, ms), put(s.fd, s.start_after_time);
    put(s.fd, s.stop_before_time), put_integer(s.fd, ms), put(s.fd, s.stop_before_samples);
    put_integer(s.fd, s.samples.load()), put(s.fd, s.stop_after_samples);
  }
  put(2, "\nmlpt run: crashed on signal "), put_integer(2, sig), put(2, " ("), put(2, signal_name(sig)), put(2, ") ");
  if (const auto* call = plugin::current_call()) {
    put(2, "in "), put(2, call->kind), put(2, " \""), put(2, call->name), put(2, "\" ("), put(2, call->file);
    put(2, ") during its "), put(2, call->call), put(2, " call");
    for (const auto* outer = call->outer; outer; outer = outer->outer)
      put(2, ", called from "), put(2, outer->kind), put(2, " \""), put(2, outer->name), put(2, "\" "), put(2, outer->call);
    put(2, "\n");
  } else {
    put(2, "outside any plugin call (in the core, or in a thread a plugin started)\n");
  }
  if (close_log) put(2, "  result log closed with run_stop status aborted: "), put(2, s.log_path), put(2, "\n");
  if (const char* dump = observe::FlightRecorder::instance().dump_from_signal(short_signal_name(sig)))
    put(2, "  the last calls into every plugin: "), put(2, dump), put(2, "\n");
  const int index = s.checkpoint_index.load();
  put(2, "  last whole checkpoint: "), put(2, index >= 0 ? s.checkpoint[index] : "none written by this run"), put(2, "\n");
  // Die of the same signal, with its default action (exit status 128 + sig, core dump).
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigemptyset(&dfl.sa_mask);
  sigaction(sig, &dfl, nullptr);
  sigset_t unblock;
  sigemptyset(&unblock);
  sigaddset(&unblock, sig);
  raise(sig);
  pthread_sigmask(SIG_UNBLOCK, &unblock, nullptr);
  _exit(128 + sig);
}

// `line` split around the decimal text of each sentinel, in order.
std::vector<std::string> split_at(const std::string& line, std::initializer_list<int64_t> sentinels) {
  std::vector<std::string> parts;
  size_t from = 0;
  for (int64_t v : sentinels) {
    const std::string text = std::to_string(v);
    const size_t at = line.find(text, from);
    parts.push_back(line.substr(from, at - from));
    from = at + text.size();
  }
  parts.push_back(line.substr(from) + "\n");
  return parts;
}

}  // namespace

CrashGuard::CrashGuard(const mllog::Logger& log, const std::filesystem::path& log_path) {
  if (g_state) throw Error(MLPT_INTERNAL, "CrashGuard: one run at a time per process");
  auto* s = new State;
  s->fd = log.fd();
  s->log_path = log_path.string();
  constexpr int64_t kTime = 987654321012345, kSamples = 876543210987654;
  const std::string where = "crash_guard.cpp";
  auto start = split_at(mllog::format_line(kTime, mllog::EventType::interval_start, mllog::keys::kRunStart, nullptr,
                                           {{"file", where}, {"lineno", __LINE__}}), {kTime});
  s->start_before_time = start[0], s->start_after_time = start[1];
  auto stop = split_at(mllog::format_line(kTime, mllog::EventType::interval_end, mllog::keys::kRunStop, nullptr,
                                          {{"file", where}, {"lineno", __LINE__},
                                           {std::string(mllog::keys::kMetaSamplesCount), kSamples},
                                           {std::string(mllog::keys::kMetaStatus), std::string(mllog::keys::kStatusAborted)},
                                           {"error", "crashed on a signal"}}),
                       {kTime, kSamples});
  s->stop_before_time = stop[0], s->stop_before_samples = stop[1], s->stop_after_samples = stop[2];
  g_state = s;
  struct sigaction sa {};
  sa.sa_sigaction = on_crash;
  sa.sa_flags = SA_SIGINFO;
  sigemptyset(&sa.sa_mask);
  for (size_t i = 0; i < std::size(kSignals); ++i) sigaction(kSignals[i], &sa, &s->previous[i]);
}

CrashGuard::~CrashGuard() {
  for (size_t i = 0; i < std::size(kSignals); ++i) sigaction(kSignals[i], &g_state->previous[i], nullptr);
  delete g_state;
  g_state = nullptr;
}

void CrashGuard::run_started() { g_state->started = true; }
void CrashGuard::samples(int64_t samples_count) { g_state->samples = samples_count; }
void CrashGuard::log_closed() { g_state->closed = true; }

void CrashGuard::checkpoint_saved(const std::filesystem::path& dir, int64_t step) {
  const std::string text = "step " + std::to_string(step) + " in " + dir.string();
  const int next = g_state->checkpoint_index.load() == 0 ? 1 : 0;
  std::snprintf(g_state->checkpoint[next], sizeof g_state->checkpoint[next], "%s", text.c_str());
  g_state->checkpoint_index = next;
}

}  // namespace mlpt::run
