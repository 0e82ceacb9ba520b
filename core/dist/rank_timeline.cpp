#include "core/dist/rank_timeline.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <system_error>
#include <thread>
#include <vector>

#include "core/error.hpp"
#include "core/observe/trace_merge.hpp"
#include "core/run/run_observer.hpp"

namespace mlpt::dist {
std::filesystem::path trace_parts_dir(const std::filesystem::path& run_dir, const std::string& attempt) {
  return run_dir / "trace_parts" / attempt;
}

std::filesystem::path trace_part_file(const std::filesystem::path& parts_dir, int rank) {
  return parts_dir / ("rank-" + std::to_string(rank) + ".json");
}

int rank_trace_group(int rank) {
  return 100 + rank;
}

void merge_rank_timelines(const std::filesystem::path& run_dir, const std::filesystem::path& parts_dir,
                          double wait_s) {
  std::error_code ec;
  const auto trace = run::trace_file(run_dir);
  if (!std::filesystem::is_directory(parts_dir, ec)) return;
  std::vector<std::filesystem::path> parts;
  for (const auto& f : std::filesystem::directory_iterator(parts_dir, ec)) parts.push_back(f.path());
  std::sort(parts.begin(), parts.end());
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(wait_s);
  for (const auto& part : parts)
    while (!observe::closing_bracket(part) && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
  try {
    if (!std::filesystem::exists(trace, ec)) return;
    const auto merged = observe::merge_trace_parts(trace, parts);
    for (const auto& part : merged.unaligned)
      std::fprintf(stderr, "[mlpt] timeline: %s has no clock origin; left out of %s\n", part.c_str(),
                   trace.c_str());
    if (merged.unaligned.empty()) std::filesystem::remove_all(parts_dir, ec);
    if (std::filesystem::is_empty(parts_dir.parent_path(), ec))
      std::filesystem::remove(parts_dir.parent_path(), ec);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "[mlpt] timeline: the ranks' parts in %s were not merged into %s: %s\n",
                 parts_dir.c_str(), trace.c_str(), e.what());
  }
}

RankTimeline::RankTimeline(int rank, std::string who, std::filesystem::path run_dir,
                           std::filesystem::path parts_dir, uint64_t max_bytes)
    : rank_(rank),
      who_(std::move(who)),
      run_dir_(std::move(run_dir)),
      part_(trace_part_file(parts_dir, rank)),
      max_bytes_(max_bytes) {
  observe::FlightRecorder::instance().set_listener(this);
}

RankTimeline::~RankTimeline() {
  observe::FlightRecorder::instance().set_listener(nullptr);  // waits for a call of it in progress
  std::lock_guard lock(mutex_);
  calls_.reset();
  trace_.reset();  // closes the part
}

void RankTimeline::call_returned(const observe::CallRecord& call) {
  if (!observe::timeline_call(call)) return;
  std::lock_guard lock(mutex_);
  if (!trace_) {
    std::error_code ec;
    if (gave_up_ || !std::filesystem::exists(run_dir_, ec)) return;
    try {
      std::filesystem::create_directories(part_.parent_path());
      trace_ = std::make_unique<observe::TraceWriter>(part_, "mlpt " + who_, max_bytes_);
      trace_->name_group(rank_trace_group(rank_), who_, 1 + rank_);  // who_ names the rank
      calls_ = std::make_unique<observe::CallTimeline>(*trace_, rank_trace_group(rank_));
    } catch (const std::exception& e) {
      gave_up_ = true;
      trace_.reset();
      std::fprintf(stderr, "[mlpt] %s: no timeline of this rank: %s\n", who_.c_str(), e.what());
      return;
    }
  }
  calls_->call_returned(call);
}

}  // namespace mlpt::dist
