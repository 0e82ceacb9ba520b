#include "core/observe/flight_recorder.hpp"

#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstring>
#include <ctime>

#include "core/observe/stamped_slot.hpp"

namespace mlpt::observe {

namespace {
constexpr uint32_t kFree = 0, kWriting = 1, kRunning = 2;
}

struct FlightRecorder::Ring {
  const char* kind = "";
  const char* first_name = nullptr;  // the pointer it was created with: most lookups match it
  char component[sizeof(CallRecord::component)] = {};
  std::atomic<uint64_t> count{0};  // places handed out; call k goes to calls[k % size]
  StampedSlot<CallRecord> calls[kCallsPerComponent];
};

namespace {

int64_t clock_ns(clockid_t clock) {  // clock_gettime is async-signal-safe
  timespec t{};
  clock_gettime(clock, &t);
  return static_cast<int64_t>(t.tv_sec) * 1000000000 + t.tv_nsec;
}

int32_t this_thread_id() {
  thread_local const int32_t id = static_cast<int32_t>(::syscall(SYS_gettid));
  return id;
}

void copy_name(char (&to)[sizeof(CallRecord::component)], const char* from) {
  size_t i = 0;
  for (; from && from[i] && i + 1 < sizeof to; ++i) to[i] = from[i];
  to[i] = '\0';
}

// Formats JSON into a buffer flushed to a file descriptor: no allocation, no locale, no stdio, so
// a signal handler may use it.
class FdWriter {
 public:
  explicit FdWriter(int fd) : fd_(fd) {}
  ~FdWriter() { flush(); }
  FdWriter& raw(const char* s) { return raw(s, std::strlen(s)); }
  FdWriter& raw(const char* s, size_t n) {
    for (size_t i = 0; i < n; ++i) {
      if (size_ == sizeof buffer_) flush();
      buffer_[size_++] = s[i];
    }
    return *this;
  }
  FdWriter& string(const char* s) {  // a JSON string: quotes, backslashes and control bytes escaped
    raw("\"");
    for (; s && *s; ++s) {
      const auto c = static_cast<unsigned char>(*s);
      if (c == '"' || c == '\\') {
        const char e[2] = {'\\', static_cast<char>(c)};
        raw(e, 2);
      } else if (c < 0x20) {
        const char* hex = "0123456789abcdef";
        const char e[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]};
        raw(e, 6);
      } else {
        raw(s, 1);
      }
    }
    return raw("\"");
  }
  FdWriter& integer(int64_t v) {
    char digits[24];
    size_t n = 0;
    const bool negative = v < 0;
    uint64_t u = negative ? 0 - static_cast<uint64_t>(v) : static_cast<uint64_t>(v);
    do {
      digits[n++] = static_cast<char>('0' + u % 10);
      u /= 10;
    } while (u);
    if (negative) raw("-");
    while (n) raw(&digits[--n], 1);
    return *this;
  }
  FdWriter& seconds(int64_t ns) {  // nanoseconds as seconds with 9 decimals
    if (ns < 0) raw("-"), ns = -ns;
    integer(ns / 1000000000);
    char frac[10] = {'.'};
    int64_t rest = ns % 1000000000;
    for (int i = 9; i >= 1; --i, rest /= 10) frac[i] = static_cast<char>('0' + rest % 10);
    return raw(frac, 10);
  }
  void flush() {
    for (size_t done = 0; done < size_;) {
      const ssize_t n = ::write(fd_, buffer_ + done, size_ - done);
      if (n <= 0) break;
      done += static_cast<size_t>(n);
    }
    size_ = 0;
  }

 private:
  int fd_;
  char buffer_[4096];
  size_t size_ = 0;
};

void write_record(FdWriter& w, const CallRecord& r, int rank, int64_t now) {
  w.raw("{\"seq\":").integer(static_cast<int64_t>(r.seq));
  w.raw(",\"kind\":")
      .string(r.kind)
      .raw(",\"component\":")
      .string(r.component)
      .raw(",\"call\":")
      .string(r.call);
  w.raw(",\"rank\":").integer(rank).raw(",\"thread\":").integer(r.thread);
  w.raw(",\"request_id\":").integer(static_cast<int64_t>(r.request_id));
  w.raw(",\"start_s\":").seconds(r.start_ns);
  if (r.status == CallRecord::kRunning) {
    w.raw(",\"duration_s\":null,\"running_for_s\":")
        .seconds(now - r.start_ns)
        .raw(",\"status\":\"running\"}");
  } else {
    w.raw(",\"duration_s\":").seconds(r.duration_ns);
    w.raw(r.status == CallRecord::kOk ? ",\"status\":\"ok\"}" : ",\"status\":\"failed\"}");
  }
}

}  // namespace

FlightRecorder& FlightRecorder::instance() {
  static FlightRecorder* recorder = new FlightRecorder();  // never destroyed: calls may come until exit
  return *recorder;
}

FlightRecorder::FlightRecorder()
    : epoch_ns_(clock_ns(CLOCK_MONOTONIC)), epoch_unix_ns_(clock_ns(CLOCK_REALTIME)) {}

int64_t FlightRecorder::now_ns() const {
  return clock_ns(CLOCK_MONOTONIC) - epoch_ns_;
}

uint32_t FlightRecorder::ring_for(const char* kind, const char* component) {
  const auto matches = [&](const Ring& r) {
    return (r.kind == kind || std::strcmp(r.kind, kind) == 0) &&
           (r.first_name == component ||
            std::strncmp(r.component, component, sizeof(Ring::component) - 1) == 0);
  };
  size_t n = num_rings_.load(std::memory_order_acquire);
  for (size_t i = 0; i < n; ++i)
    if (matches(*rings_[i].load(std::memory_order_relaxed))) return static_cast<uint32_t>(i);
  std::lock_guard lock(mutex_);  // a new component: rare, and only adding takes the lock
  n = num_rings_.load(std::memory_order_relaxed);
  for (size_t i = 0; i < n; ++i)
    if (matches(*rings_[i].load(std::memory_order_relaxed))) return static_cast<uint32_t>(i);
  if (n == kMaxComponents) return kMaxComponents - 1;  // "(other components)"
  auto* ring = new Ring();
  ring->kind = kind;
  ring->first_name = n == kMaxComponents - 1 ? nullptr : component;
  copy_name(ring->component, n == kMaxComponents - 1 ? "(other components)" : component);
  rings_[n].store(ring, std::memory_order_relaxed);
  num_rings_.store(n + 1, std::memory_order_release);
  return static_cast<uint32_t>(n);
}

uint32_t FlightRecorder::begin(const char* kind, const char* component, const char* call,
                               uint64_t request_id) {
  const int64_t start = now_ns();
  const uint64_t seq = next_seq_.fetch_add(1, std::memory_order_relaxed);
  // Each thread starts looking where it last found a free slot, so threads rarely meet.
  thread_local uint32_t hint = static_cast<uint32_t>(this_thread_id() * 2654435761u) % kMaxRunning;
  for (uint32_t tried = 0; tried < kMaxRunning; ++tried) {
    const uint32_t i = (hint + tried) % kMaxRunning;
    Slot& slot = running_[i];
    uint32_t expected = kFree;
    if (slot.state.load(std::memory_order_relaxed) != kFree ||
        !slot.state.compare_exchange_strong(expected, kWriting, std::memory_order_acquire))
      continue;
    slot.ring = ring_for(kind, component);
    CallRecord& r = slot.call;
    r.seq = seq, r.kind = kind, r.call = call, r.request_id = request_id, r.thread = this_thread_id();
    copy_name(r.component, component);
    r.start_ns = start, r.duration_ns = -1, r.status = CallRecord::kRunning;
    slot.state.store(kRunning, std::memory_order_release);
    hint = i;
    return i;
  }
  return kNotRecorded;
}

void FlightRecorder::end(uint32_t token, bool failed) {
  if (token == kNotRecorded) return;
  const int64_t end = now_ns();
  Slot& slot = running_[token];
  CallRecord done = slot.call;  // this thread's own slot: no one else writes it
  done.duration_ns = end - done.start_ns;
  done.status = failed ? CallRecord::kFailed : CallRecord::kOk;
  Ring& ring = *rings_[slot.ring].load(std::memory_order_acquire);
  const uint64_t k = ring.count.fetch_add(1, std::memory_order_relaxed);
  StampedSlot<CallRecord>& entry = ring.calls[k % kCallsPerComponent];
  if (entry.claim(k)) entry.publish(k, done);
  slot.state.store(kFree, std::memory_order_release);
  if (listener_.load(std::memory_order_acquire)) {
    std::shared_lock lock(listener_mutex_);
    if (auto* l = listener_.load()) l->call_returned(done);
  }
}

bool FlightRecorder::read_running(const Slot& slot, CallRecord& out) const {
  if (slot.state.load(std::memory_order_acquire) != kRunning) return false;
  out = slot.call;
  std::atomic_thread_fence(std::memory_order_acquire);
  return slot.state.load(std::memory_order_relaxed) == kRunning && out.seq == slot.call.seq;
}

template <class Visit>
void FlightRecorder::for_each_recent(const Ring& ring, Visit&& visit) const {
  const uint64_t count = ring.count.load(std::memory_order_acquire);
  const uint64_t kept = count < kCallsPerComponent ? count : kCallsPerComponent;
  for (uint64_t k = count - kept; k < count; ++k) {
    CallRecord copy;
    if (ring.calls[k % kCallsPerComponent].read(k, copy)) visit(copy);  // else being written, or lapped
  }
}

void FlightRecorder::set_listener(CallListener* listener) {
  std::unique_lock lock(listener_mutex_);
  listener_.store(listener, std::memory_order_release);
}

void FlightRecorder::set_dump_folder(const std::filesystem::path& folder) {
  std::lock_guard lock(mutex_);
  const std::string s = folder.string();
  const size_t n = std::min(s.size(), sizeof dump_folder_ - 1);
  std::memcpy(dump_folder_, s.data(), n);
  dump_folder_[n] = '\0';
}

std::vector<CallRecord> FlightRecorder::running() const {
  std::vector<CallRecord> out;
  CallRecord r;
  for (const auto& slot : running_)
    if (read_running(slot, r)) out.push_back(r);
  return out;
}

std::vector<CallRecord> FlightRecorder::recent() const {
  std::vector<CallRecord> out;
  const size_t rings = num_rings_.load(std::memory_order_acquire);
  for (size_t i = 0; i < rings; ++i)
    for_each_recent(*rings_[i].load(std::memory_order_relaxed),
                    [&](const CallRecord& r) { out.push_back(r); });
  return out;
}

void FlightRecorder::write_dump(int fd, const char* reason, int64_t now, std::span<const CallRecord> hung,
                                int64_t seen_at_ns) const {
  FdWriter w(fd);
  const int rank = rank_.load();
  w.raw("{\"reason\":").string(reason).raw(",\"pid\":").integer(::getpid()).raw(",\"rank\":").integer(rank);
  w.raw(",\"recorder_started_unix_s\":").seconds(epoch_unix_ns_);
  w.raw(",\"written_at_s\":")
      .seconds(now)
      .raw(",\"calls_recorded\":")
      .integer(static_cast<int64_t>(next_seq_.load() - 1));
  w.raw(",\"calls_kept_per_component\":").integer(static_cast<int64_t>(kCallsPerComponent));
  if (!hung.empty()) {  // as they were when judged hung: "running" is read now, when they may have returned
    w.raw(",\n\"hung_calls\":[");
    for (size_t i = 0; i < hung.size(); ++i) {
      w.raw(i ? ",\n" : "\n");
      write_record(w, hung[i], rank, seen_at_ns);
    }
    w.raw("]");
  }
  w.raw(",\n\"running\":[");  // the calls that have not returned: what a hung run waits on
  bool first = true;
  CallRecord r;
  for (const auto& slot : running_) {
    if (!read_running(slot, r)) continue;
    w.raw(first ? "\n" : ",\n");
    write_record(w, r, rank, now);
    first = false;
  }
  w.raw("],\n\"recent\":[");
  const size_t rings = num_rings_.load(std::memory_order_acquire);
  for (size_t i = 0; i < rings; ++i) {
    const Ring& ring = *rings_[i].load(std::memory_order_relaxed);
    w.raw(i ? ",\n{\"kind\":" : "\n{\"kind\":")
        .string(ring.kind)
        .raw(",\"component\":")
        .string(ring.component);
    w.raw(",\"calls\":[");
    bool first_call = true;
    for_each_recent(ring, [&](const CallRecord& call) {
      w.raw(first_call ? "\n" : ",\n");
      write_record(w, call, rank, now);
      first_call = false;
    });
    w.raw("]}");
  }
  w.raw("]}\n");
}

std::filesystem::path FlightRecorder::dump(const std::string& why, const std::string& reason,
                                           std::span<const CallRecord> hung, int64_t seen_at_ns) {
  std::lock_guard lock(mutex_);
  if (!dump_folder_[0]) return {};
  std::error_code ec;
  std::filesystem::create_directories(dump_folder_, ec);
  const auto path =
      std::filesystem::path(dump_folder_) / ("dump-" + std::to_string(++dumps_) + "-" + why + ".json");
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return {};
  write_dump(fd, reason.c_str(), now_ns(), hung, seen_at_ns);
  ::close(fd);
  return path;
}

const char* FlightRecorder::dump_from_signal(const char* why) {
  if (!dump_folder_[0]) return nullptr;
  // dump_folder_/dump-<N>-<why>.json, built without allocating; the folder exists once a run set it.
  char* path = signal_dump_path_;
  constexpr size_t kPathSize = sizeof signal_dump_path_;
  size_t n = 0;
  auto append = [&](const char* s) {
    for (; *s && n + 1 < kPathSize; ++s) path[n++] = *s;
  };
  append(dump_folder_);
  append("/dump-");
  char digits[24];
  size_t d = 0;
  for (uint64_t v = ++dumps_; v; v /= 10) digits[d++] = static_cast<char>('0' + v % 10);
  while (d && n + 1 < kPathSize) path[n++] = digits[--d];
  append("-");
  append(why);
  append(".json");
  path[n] = '\0';
  const int fd = ::open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return nullptr;
  write_dump(fd, why, now_ns());
  ::close(fd);
  return path;
}

}  // namespace mlpt::observe
