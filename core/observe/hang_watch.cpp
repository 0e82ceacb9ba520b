#include "core/observe/hang_watch.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

namespace mlpt::observe {
namespace {
std::string seconds(double s) {
  char text[32];
  std::snprintf(text, sizeof text, s < 10 ? "%.2f" : "%.0f", s);
  return text;
}
}  // namespace

HangWatch::HangWatch(double after_s, Report report, double poll_s)
    : after_ns_(static_cast<int64_t>(after_s * 1e9)), report_(std::move(report)) {
  if (poll_s <= 0) poll_s = std::clamp(after_s / 4, 0.01, 10.0);
  const auto period = std::chrono::duration<double>(poll_s);
  thread_ = std::thread([this, period] {
    std::unique_lock lock(mutex_);
    while (!wake_.wait_for(lock, period, [this] { return stop_; })) {
      lock.unlock();
      check();
      lock.lock();
    }
  });
}

HangWatch::~HangWatch() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

int HangWatch::check() { return check(FlightRecorder::instance().now_ns()); }

int HangWatch::check(int64_t now) {
  std::lock_guard guard(check_mutex_);
  auto& recorder = FlightRecorder::instance();
  std::set<uint64_t> still_running;
  std::vector<CallRecord> hung;  // past the threshold, not reported before
  for (const CallRecord& call : recorder.running()) {
    still_running.insert(call.seq);
    if (now - call.start_ns >= after_ns_ && !reported_.count(call.seq)) hung.push_back(call);
  }
  // Forget calls that returned, so the set stays as small as the calls in flight.
  for (auto it = reported_.begin(); it != reported_.end();)
    it = still_running.count(*it) ? std::next(it) : reported_.erase(it);
  if (hung.empty()) return 0;
  // One dump for all of them: an engine that stalls stalls its many requests at once.
  const auto running_s = [now](const CallRecord& call) {
    return static_cast<double>(now - call.start_ns) * 1e-9;
  };
  std::string reason;
  for (const CallRecord& call : hung)
    reason += (reason.empty() ? "" : "; ") + std::string(call.kind) + " '" + call.component + "' call " +
              call.call + " has not returned after " + seconds(running_s(call)) + " s";
  const auto dump = recorder.dump("hang", reason, hung, now);
  for (const CallRecord& call : hung) {
    reported_.insert(call.seq);
    if (report_) report_(call, running_s(call), dump);
  }
  return static_cast<int>(hung.size());
}

std::string HangWatch::message(const std::string& where, const CallRecord& call, double running_s,
                               const std::filesystem::path& dump) {
  return "[mlpt] " + where + (where.empty() ? "" : ": ") + call.kind + " '" + call.component + "' call " +
         call.call + " (request " + std::to_string(call.request_id) + ", thread " +
         std::to_string(call.thread) + ") has not returned after " + seconds(running_s) +
         " s; the calls in flight and the last calls into every plugin are in " +
         (dump.empty() ? std::string("(no dump written)") : dump.string());
}

}  // namespace mlpt::observe
