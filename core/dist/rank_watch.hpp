// What a rank other than the coordinator shows of itself while a distributed run goes: its flight
// recorder's dumps (the last calls into its plugins, and those that have not returned) in the
// run folder's flight_recorder/rank-N/, written on `kill -USR1` (mpirun passes the signal on to
// every rank), when one of its plugin calls runs past [run] hang_dump_after_s, and when the rank
// ends in failure. The coordinator's own views are run::RunObserver's.
#pragma once

#include <filesystem>
#include <memory>
#include <string>

#include "core/observe/dump_on_signal.hpp"
#include "core/observe/hang_watch.hpp"

namespace mlpt::dist {

// flight_recorder/rank-N/ of a run folder.
std::filesystem::path rank_dump_dir(const std::filesystem::path& run_dir, int rank);

class RankWatch {
 public:
  // `who`: how messages name the rank ("trainer rank 2"); `hang_after_s` 0: no hang watch.
  RankWatch(int rank, std::string who, const std::filesystem::path& run_dir, double hang_after_s);
  ~RankWatch();
  RankWatch(const RankWatch&) = delete;
  RankWatch& operator=(const RankWatch&) = delete;

  // The rank ends in failure: a dump saying `reason` (none when the run folder does not exist yet).
  void failed(const std::string& reason);

 private:
  const std::string who_;
  const std::filesystem::path run_dir_;
  std::unique_ptr<observe::DumpOnSignal> on_signal_;
  std::unique_ptr<observe::HangWatch> hang_watch_;
};

}  // namespace mlpt::dist
