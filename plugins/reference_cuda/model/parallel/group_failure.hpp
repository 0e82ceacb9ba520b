// How the ranks of a model-parallel group hear that one of them failed while they may be waiting
// for it inside a collective, which MPI cannot cancel (a rank that throws halfway through a step,
// after some of its collectives, would otherwise leave the others waiting forever). The failing
// rank calls `report`: it sends every other rank its reason on a communicator kept for this (never
// waiting for them). Every wait of the group's collectives and messages goes through `wait`, which
// also polls for such a report and then throws MLPT_UNAVAILABLE naming the rank that failed. A
// collective may be left half done, so the group's communicators are unusable afterwards: the group
// is broken for good, and every later `check` or `wait` throws the same error. Built only with MPI
// (MLPT_REFERENCE_MODEL_MPI). Thread-safe.
#pragma once

#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace mlpt::ref {

class GroupFailure {
 public:
  // `comm`: the group's MPI communicator (an MPI_Comm, duplicated here, not taken); `group`: how
  // errors name the group ("engine group 'x'").
  GroupFailure(void* comm, std::string group);
  ~GroupFailure();
  GroupFailure(const GroupFailure&) = delete;
  GroupFailure& operator=(const GroupFailure&) = delete;

  // This rank failed: tells every other rank why (only the first report counts) and breaks the group.
  void report(const std::string& why);
  // Throws MLPT_UNAVAILABLE naming the failed rank once any rank of the group has failed.
  void check();
  bool broken();
  // Waits for `request` (an MPI_Request*; `what` names the call in errors) and throws as `check`
  // does when a rank fails meanwhile (the request is then left to MPI). Spins a little, then
  // sleeps briefly between tests: an idle rank costs next to nothing.
  void wait(void* request, const char* what);

 private:
  void poll_locked();
  [[noreturn]] void throw_locked() const;

  std::mutex mutex_;
  void* comm_ = nullptr;
  int rank_ = 0, size_ = 1;
  std::string group_;
  std::optional<std::pair<int, std::string>> failure_;  // (rank, why)
  std::string reported_;      // this rank's report, kept while MPI may read it
  std::vector<void*> sends_;  // its requests (MPI_Request*), left to MPI
};

}  // namespace mlpt::ref
