// The flight recorder at the ABI boundary: every call into a plugin (plugin::CallScope marks them)
// is recorded with its component, function, rank, thread, request id, start, duration and status.
// Each component keeps its last kCallsPerComponent calls in a ring, and calls that have not
// returned are kept apart until they do, however many calls come after: when a run hangs, the dump
// names the call that did not return. Dumps are JSON files in a folder the run sets; the run
// writes one when it aborts, on SIGUSR1 (live), and the crash guard when a signal kills it.
//
// Recording takes no lock: a call claims a free slot with one compare-and-swap and, when it
// returns, a place in its component's ring with one fetch-add and the entry with one more; each
// ring entry is a seqlock (stamped_slot.hpp: an odd stamp while it is written), so a reader copies
// an entry and keeps it only if the stamp did not move. Threads calling plugins at once wait for
// one another only when a ring comes all the way round while one of them is writing an entry: the
// newer call then waits for the older to finish, so no entry is written twice at once nor lost.
#pragma once

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <mutex>
#include <shared_mutex>
#include <span>
#include <string>
#include <vector>

namespace mlpt::observe {

struct CallRecord {
  enum Status : uint8_t { kRunning, kOk, kFailed };
  uint64_t seq = 0;          // the call's number among this process's calls (from 1)
  const char* kind = "";     // "engine", ... (a string literal)
  char component[48] = {};   // the component's name (cut to 47 bytes)
  const char* call = "";     // the ABI function (a string literal)
  uint64_t request_id = 0;   // the engine request or rollout it serves; 0: none
  int32_t thread = 0;        // the OS thread id
  int64_t start_ns = 0;      // steady clock, since the recorder started
  int64_t duration_ns = -1;  // -1 while running
  Status status = kRunning;  // kFailed: the call returned an error (or threw)
};

// Told of every call that returned (e.g. the run's timeline); on the calling thread, so quick.
class CallListener {
 public:
  virtual ~CallListener() = default;
  virtual void call_returned(const CallRecord& call) = 0;
};

class FlightRecorder {
 public:
  static constexpr size_t kCallsPerComponent = 1024;
  static constexpr size_t kMaxComponents = 64;  // more are recorded as "(other components)"
  static constexpr size_t kMaxRunning = 4096;   // calls in flight at once; more go unrecorded
  static constexpr uint32_t kNotRecorded = UINT32_MAX;

  static FlightRecorder& instance();  // the process's; lives until exit

  // A call begins; returns the token its end() takes. `kind` and `call` must be string literals.
  uint32_t begin(const char* kind, const char* component, const char* call, uint64_t request_id);
  void end(uint32_t token, bool failed);

  void set_rank(int rank) { rank_.store(rank); }
  // At most one listener; null removes it (waiting for any call of it in progress to return).
  void set_listener(CallListener* listener);
  // Where dumps go: `folder`/dump-<N>-<why>.json. Empty: nowhere (a dump is then skipped).
  void set_dump_folder(const std::filesystem::path& folder);

  // Writes a dump saying `reason`; returns its path (empty when no folder is set or it failed).
  // `hung`: the calls the dump is about, as they were seen at `seen_at_ns` (now_ns()'s clock). They
  // are written as "hung_calls" whether or not they have returned since, so the dump names them
  // even when they end between the look and the write.
  std::filesystem::path dump(const std::string& why, const std::string& reason,
                             std::span<const CallRecord> hung = {}, int64_t seen_at_ns = 0);
  // The same from a signal handler: takes no lock, allocates nothing, calls only write/open/close
  // and clock_gettime; the calls it reads may be changing meanwhile (a crash dump is best effort).
  // Returns the dump's path (a buffer of the recorder's), or null when none was written.
  const char* dump_from_signal(const char* why);

  // What a dump holds: the running calls, then every component's ring, oldest first (an entry
  // being rewritten at that moment is left out).
  std::vector<CallRecord> running() const;
  std::vector<CallRecord> recent() const;
  uint64_t calls() const { return next_seq_.load() - 1; }
  int64_t now_ns() const;

 private:
  FlightRecorder();
  struct Ring;
  struct Slot {                      // a call in flight
    std::atomic<uint32_t> state{0};  // kFree, kWriting, kRunning
    uint32_t ring = 0;               // its component's ring
    CallRecord call;
  };
  uint32_t ring_for(const char* kind, const char* component);
  bool read_running(const Slot& slot, CallRecord& out) const;  // false: not a running call
  template <class Visit>
  void for_each_recent(const Ring& ring, Visit&& visit) const;  // the kept calls, oldest first
  void write_dump(int fd, const char* reason, int64_t now, std::span<const CallRecord> hung = {},
                  int64_t seen_at_ns = 0) const;

  std::mutex mutex_;  // only to add a ring and to number dumps
  std::atomic<uint64_t> next_seq_{1};
  std::atomic<int> rank_{0};
  std::atomic<uint64_t> dumps_{0};
  int64_t epoch_ns_ = 0;       // the steady clock at start
  int64_t epoch_unix_ns_ = 0;  // the wall clock at start
  Slot running_[kMaxRunning];
  std::atomic<Ring*> rings_[kMaxComponents] = {};
  std::atomic<size_t> num_rings_{0};
  char dump_folder_[4096] = {};
  char signal_dump_path_[sizeof dump_folder_ + 64] = {};
  std::shared_mutex listener_mutex_;
  std::atomic<CallListener*> listener_{nullptr};
};

}  // namespace mlpt::observe
