#include "core/observe/trace_writer.hpp"

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "core/error.hpp"

namespace mlpt::observe {
namespace {

// Room kept below the cap for the marker where dropping begins and the closing event.
constexpr uint64_t kReserveBytes = 1024;

double microseconds(double seconds) {
  return seconds * 1e6;
}  // the format's unit

}  // namespace

TraceWriter::TraceWriter(const std::filesystem::path& file, const std::string& title, uint64_t max_bytes)
    : file_(file),
      max_bytes_(std::max<uint64_t>(max_bytes, 2 * kReserveBytes)),
      origin_(Clock::now()),
      origin_unix_ns_(std::chrono::duration_cast<std::chrono::nanoseconds>(
                          std::chrono::system_clock::now().time_since_epoch())
                          .count()) {
  if (std::filesystem::exists(file_))
    throw Error(MLPT_ALREADY_EXISTS, file_.string() + ": a trace is there already");
  out_.open(file_, std::ios::binary);
  if (!out_)
    throw Error(MLPT_INTERNAL, file_.string() + ": cannot open for writing: " + std::strerror(errno));
  out_ << "[";
  bytes_ = 1;
  write({{"name", "process_name"}, {"ph", "M"}, {"pid", 0}, {"tid", 0}, {"args", {{"name", title}}}});
  write(
      {{"name", "trace capped at " + std::to_string(max_bytes_ >> 20) + " MB"},
       {"cat", "mlpt"},
       {"ph", "i"},
       {"s", "g"},
       {"ts", 0},
       {"pid", 0},
       {"tid", 0},
       {"args",
        {{"max_bytes", max_bytes_},
         {"clock_origin_unix_ns", origin_unix_ns_},
         {"policy",
          "events past the cap are dropped; a marker says where dropping began, the last event how many"}}}});
}

TraceWriter::~TraceWriter() {
  close();
}

void TraceWriter::name_group(int group, const std::string& name, int sort_index) {
  write({{"name", "process_name"}, {"ph", "M"}, {"pid", group}, {"tid", 0}, {"args", {{"name", name}}}});
  write({{"name", "process_sort_index"},
         {"ph", "M"},
         {"pid", group},
         {"tid", 0},
         {"args", {{"sort_index", sort_index}}}});
}

void TraceWriter::name_track(int group, int track, const std::string& name, int sort_index) {
  write({{"name", "thread_name"}, {"ph", "M"}, {"pid", group}, {"tid", track}, {"args", {{"name", name}}}});
  write({{"name", "thread_sort_index"},
         {"ph", "M"},
         {"pid", group},
         {"tid", track},
         {"args", {{"sort_index", sort_index}}}});
}

void TraceWriter::span(int group, int track, std::string_view name, std::string_view category, double start,
                       double duration, const nlohmann::json& args) {
  nlohmann::json e = {{"name", name},
                      {"cat", category},
                      {"ph", "X"},
                      {"ts", microseconds(start)},
                      {"dur", microseconds(std::max(duration, 0.0))},
                      {"pid", group},
                      {"tid", track}};
  if (!args.is_null()) e["args"] = args;
  write(std::move(e));
}

void TraceWriter::counter(int group, std::string_view name, double at, const nlohmann::json& values) {
  write(
      {{"name", name}, {"ph", "C"}, {"ts", microseconds(at)}, {"pid", group}, {"tid", 0}, {"args", values}});
}

void TraceWriter::write(nlohmann::json event) {
  std::string text = event.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  std::lock_guard lock(mutex_);
  if (closed_) return;
  if (bytes_ + text.size() + 2 > max_bytes_ - kReserveBytes) {
    if (dropped_++ > 0) return;
    // The first event past the cap: say so where it happened, on every track (global scope).
    text = nlohmann::json{
        {"name", "trace cap reached: later events dropped"},
        {"cat", "mlpt"},
        {"ph", "i"},
        {"s", "g"},
        {"ts", microseconds(now())},
        {"pid", 0},
        {"tid",
         0}}.dump();
  } else {
    ++written_;
  }
  out_ << (first_ ? "\n" : ",\n") << text;
  first_ = false;
  bytes_ += text.size() + 2;
  out_.flush();
}

void TraceWriter::close() {
  std::lock_guard lock(mutex_);
  if (closed_) return;
  const std::string last = nlohmann::json{{"name", "trace end"},
                                          {"cat", "mlpt"},
                                          {"ph", "i"},
                                          {"s", "g"},
                                          {"ts", microseconds(now())},
                                          {"pid", 0},
                                          {"tid", 0},
                                          {"args", {{"events", written_}, {"dropped_events", dropped_}}}}
                               .dump();
  out_ << ",\n" << last << "\n]\n";
  out_.flush();
  closed_ = true;
}

uint64_t TraceWriter::dropped() const {
  std::lock_guard lock(mutex_);
  return dropped_;
}

}  // namespace mlpt::observe
