#include "model/parallel/group_failure.hpp"

#include <mpi.h>

#include <chrono>
#include <thread>

#include "mlpt/sdk/error.hpp"
#include "mlpt/sdk/mpi_status.hpp"

namespace mlpt::ref {

namespace {
constexpr int kFailureTag = 0x6661;  // "fa": a rank's report, on the communicator kept for them

MPI_Comm as_comm(void* c) { return static_cast<MPI_Comm>(c); }

void check_mpi(int rc, const std::string& group, const char* what) { sdk::check_mpi<sdk::Error>(rc, group + ": " + what); }
}  // namespace

GroupFailure::GroupFailure(void* comm, std::string group) : group_(std::move(group)) {
  MPI_Comm dup = MPI_COMM_NULL;
  check_mpi(MPI_Comm_dup(as_comm(comm), &dup), group_, "MPI_Comm_dup (failure reports)");
  MPI_Comm_set_errhandler(dup, MPI_ERRORS_RETURN);
  comm_ = dup;
  MPI_Comm_rank(dup, &rank_);
  MPI_Comm_size(dup, &size_);
}

GroupFailure::~GroupFailure() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  for (void* r : sends_) {
    auto* request = static_cast<MPI_Request*>(r);
    if (!finalized && *request != MPI_REQUEST_NULL) MPI_Request_free(request);
    delete request;
  }
  MPI_Comm comm = as_comm(comm_);
  if (!finalized) MPI_Comm_free(&comm);
}

void GroupFailure::report(const std::string& why) {
  std::lock_guard lk(mutex_);
  if (failure_) return;
  failure_.emplace(rank_, why);
  reported_ = why.substr(0, 4096);  // sent once: MPI reads these bytes after this returns
  for (int to = 0; to < size_; ++to) {
    if (to == rank_) continue;
    auto* request = new MPI_Request(MPI_REQUEST_NULL);
    sends_.push_back(request);
    // Best effort: a rank this cannot reach learns of the failure some other way (a timeout).
    MPI_Isend(reported_.data(), static_cast<int>(reported_.size()), MPI_CHAR, to, kFailureTag, as_comm(comm_), request);
  }
}

void GroupFailure::poll_locked() {
  if (failure_) return;
  int flag = 0;
  MPI_Message message;
  MPI_Status status;
  if (MPI_Improbe(MPI_ANY_SOURCE, kFailureTag, as_comm(comm_), &flag, &message, &status) != MPI_SUCCESS || !flag) return;
  int count = 0;
  MPI_Get_count(&status, MPI_CHAR, &count);
  std::string why(static_cast<size_t>(count), '\0');
  MPI_Mrecv(why.data(), count, MPI_CHAR, &message, &status);
  failure_.emplace(status.MPI_SOURCE, std::move(why));
}

void GroupFailure::throw_locked() const {
  throw sdk::Error(MLPT_UNAVAILABLE, group_ + ": rank " + std::to_string(failure_->first) + " failed (" + failure_->second +
                                         "); the group's collectives are abandoned, it serves no more");
}

void GroupFailure::check() {
  std::lock_guard lk(mutex_);
  poll_locked();
  if (failure_) throw_locked();
}

bool GroupFailure::broken() {
  std::lock_guard lk(mutex_);
  poll_locked();
  return failure_.has_value();
}

void GroupFailure::wait(void* request_ptr, const char* what) {
  auto& request = *static_cast<MPI_Request*>(request_ptr);
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  auto next_check = start;
  for (;;) {
    int done = 0;
    check_mpi(MPI_Test(&request, &done, MPI_STATUS_IGNORE), group_, what);
    if (done) return;
    const auto now = Clock::now();
    if (now >= next_check) {
      check();
      next_check = now + std::chrono::milliseconds(1);
    }
    // A step's collectives follow each other closely: spin briefly, then let the core go.
    const auto waited = now - start;
    if (waited < std::chrono::milliseconds(2))
      std::this_thread::yield();
    else if (waited < std::chrono::milliseconds(100))
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    else
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

}  // namespace mlpt::ref
