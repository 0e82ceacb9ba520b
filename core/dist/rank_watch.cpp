#include "core/dist/rank_watch.hpp"

#include <cstdio>
#include <system_error>

#include "core/observe/flight_recorder.hpp"

namespace mlpt::dist {

std::filesystem::path rank_dump_dir(const std::filesystem::path& run_dir, int rank) {
  return run_dir / "flight_recorder" / ("rank-" + std::to_string(rank));
}

RankWatch::RankWatch(int rank, std::string who, const std::filesystem::path& run_dir, double hang_after_s)
    : who_(std::move(who)), run_dir_(run_dir) {
  auto& recorder = observe::FlightRecorder::instance();
  recorder.set_rank(rank);
  recorder.set_dump_folder(rank_dump_dir(run_dir, rank));  // made by the first dump
  on_signal_ = std::make_unique<observe::DumpOnSignal>([this](const std::filesystem::path& path) {
    std::fprintf(stderr, "[mlpt] %s: SIGUSR1: the last calls into its plugins are in %s\n", who_.c_str(),
                 path.empty() ? "(no dump written)" : path.c_str());
  });
  if (hang_after_s > 0)
    hang_watch_ = std::make_unique<observe::HangWatch>(
        hang_after_s,
        [this](const observe::CallRecord& call, double running_s, const std::filesystem::path& dump) {
          std::fprintf(stderr, "%s\n", observe::HangWatch::message(who_, call, running_s, dump).c_str());
        });
}

RankWatch::~RankWatch() {
  hang_watch_.reset();
  on_signal_.reset();
  observe::FlightRecorder::instance().set_dump_folder({});
}

void RankWatch::failed(const std::string& reason) {
  // A rank that fails before the coordinator opened the run folder (a refused layout) writes
  // nothing: a run that did not start leaves no folder behind.
  std::error_code ec;
  if (!std::filesystem::exists(run_dir_, ec)) return;
  const auto path = observe::FlightRecorder::instance().dump("failed", who_ + ": " + reason);
  if (!path.empty())
    std::fprintf(stderr, "[mlpt] %s: the last calls into its plugins: %s\n", who_.c_str(), path.c_str());
}

}  // namespace mlpt::dist
