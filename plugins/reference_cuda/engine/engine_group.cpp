#include "engine/engine_group.hpp"

#include <chrono>
#include <climits>
#include <thread>

#include "mlpt/sdk/plugin.hpp"

#ifdef MLPT_REFERENCE_MPI
#include <mpi.h>

#include "model/parallel/mpi_communicator.hpp"
#include "model/parallel/mpi_group.hpp"
#endif

namespace mlpt::ref {

using sdk::Error;

namespace {
#ifdef MLPT_REFERENCE_MPI
MPI_Comm as_comm(void* c) { return static_cast<MPI_Comm>(c); }

void check_mpi(int rc, const std::string& group, const std::string& what) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int n = 0;
  MPI_Error_string(rc, text, &n);
  throw Error(MLPT_UNAVAILABLE, "engine group '" + group + "': " + what + " failed: " + std::string(text, static_cast<size_t>(n)));
}

// Waits for `request` without holding a core: tests it in a tight loop for a short while (a step
// follows the last one at once while rank 0 is busy), then with short sleeps, and once rank 0 has
// been idle a while with sleeps of a millisecond (what the next step waits at most, extra).
void wait_idle(MPI_Request& request, const std::string& group) {
  const auto start = std::chrono::steady_clock::now();
  for (;;) {
    int done = 0;
    check_mpi(MPI_Test(&request, &done, MPI_STATUS_IGNORE), group, "MPI_Test");
    if (done) return;
    const auto waited = std::chrono::steady_clock::now() - start;
    if (waited < std::chrono::milliseconds(2))
      std::this_thread::yield();
    else if (waited < std::chrono::milliseconds(100))
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    else
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}
#endif
}  // namespace

EngineGroup::EngineGroup(const mlpt_component_group* group, int tp, int ep) {
  if (group) {
    sdk::require_struct(group, MLPT_COMPONENT_GROUP_STRUCT_SIZE, "mlpt_component_group");
    name_ = sdk::to_string(group->name);
    rank_ = group->rank, size_ = group->size;
    if (size_ < 1 || rank_ < 0 || rank_ >= size_)
      throw Error(MLPT_INVALID_ARGUMENT, "engine group '" + name_ + "': rank " + std::to_string(rank_) + " of " + std::to_string(size_));
  }
  if (size_ != tp * ep)
    throw Error(MLPT_INVALID_ARGUMENT, "engine settings tensor_parallel " + std::to_string(tp) + " × expert_parallel " +
                                           std::to_string(ep) + " need an engine group of " + std::to_string(tp * ep) +
                                           " ranks; this engine is one of " + std::to_string(size_) +
                                           (group ? " (component_group '" + name_ + "')" : " (no component_group)"));
  shard_ = ModelShard::of_world_rank(tp, ep, rank_);
  if (size_ == 1) return;
#ifdef MLPT_REFERENCE_MPI
  MPI_Comm comm = as_comm(meet_mpi_group("engine group", name_, rank_, size_, /*tag=*/0x656e));
  comm_ = comm;
  // The model's communicators: the tp ranks of this rank's ep_rank, the ep ranks of its tp_rank.
  auto split = [&](int color, int key_in_group, const char* what) {
    MPI_Comm out = MPI_COMM_NULL;
    check_mpi(MPI_Comm_split(comm, color, key_in_group, &out), name_, std::string("MPI_Comm_split (") + what + ")");
    return std::make_unique<MpiCommunicator>(static_cast<void*>(out));
  };
  tensor_ = split(shard_.ep_rank, shard_.tp_rank, "tensor parallel");
  expert_ = split(shard_.tp_rank, shard_.ep_rank, "expert parallel");
  if (tp == 1) tensor_.reset();
  if (ep == 1) expert_.reset();
  parallel_ = ModelParallel{tensor_.get(), expert_.get()};
#else
  throw Error(MLPT_UNIMPLEMENTED, "engine group '" + name_ + "' of " + std::to_string(size_) +
                                      " ranks: this mlpt_reference plugin was built without MPI (install libopenmpi-dev and rebuild)");
#endif
}

EngineGroup::~EngineGroup() {
  tensor_.reset();
  expert_.reset();
#ifdef MLPT_REFERENCE_MPI
  if (comm_) {
    MPI_Comm comm = as_comm(comm_);
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Comm_free(&comm);
  }
#endif
}

void EngineGroup::send(const std::vector<char>& message) {
  if (rank_ != 0) throw Error(MLPT_INTERNAL, "engine group '" + name_ + "': only rank 0 sends");
  if (size_ == 1) return;
#ifdef MLPT_REFERENCE_MPI
  if (message.size() > static_cast<size_t>(INT_MAX))
    throw Error(MLPT_OUT_OF_RANGE, "engine group '" + name_ + "': a step message of " + std::to_string(message.size()) + " bytes");
  unsigned long long bytes = message.size();
  MPI_Request request = MPI_REQUEST_NULL;  // the others wait for it with MPI_Ibcast: so must rank 0
  check_mpi(MPI_Ibcast(&bytes, 1, MPI_UNSIGNED_LONG_LONG, 0, as_comm(comm_), &request), name_, "MPI_Ibcast");
  check_mpi(MPI_Wait(&request, MPI_STATUS_IGNORE), name_, "MPI_Wait");
  check_mpi(MPI_Bcast(const_cast<char*>(message.data()), static_cast<int>(bytes), MPI_CHAR, 0, as_comm(comm_)), name_, "MPI_Bcast");
#endif
}

std::vector<char> EngineGroup::receive() {
  if (rank_ == 0) throw Error(MLPT_INTERNAL, "engine group '" + name_ + "': rank 0 does not receive");
  std::vector<char> message;
#ifdef MLPT_REFERENCE_MPI
  unsigned long long bytes = 0;
  MPI_Request request = MPI_REQUEST_NULL;
  check_mpi(MPI_Ibcast(&bytes, 1, MPI_UNSIGNED_LONG_LONG, 0, as_comm(comm_), &request), name_, "MPI_Ibcast");
  wait_idle(request, name_);
  message.resize(static_cast<size_t>(bytes));
  check_mpi(MPI_Bcast(message.data(), static_cast<int>(bytes), MPI_CHAR, 0, as_comm(comm_)), name_, "MPI_Bcast");
#endif
  return message;
}

std::optional<EngineGroup::Refusal> EngineGroup::first_refusal(mlpt_error_code code, const std::string& mine) {
  if (size_ == 1) return mine.empty() ? std::nullopt : std::optional<Refusal>(Refusal{0, code, mine});
#ifdef MLPT_REFERENCE_MPI
  int first = mine.empty() ? size_ : rank_;
  check_mpi(MPI_Allreduce(MPI_IN_PLACE, &first, 1, MPI_INT, MPI_MIN, as_comm(comm_)), name_, "MPI_Allreduce");
  if (first == size_) return std::nullopt;
  Refusal r{first, code, first == rank_ ? mine : std::string()};
  unsigned long long head[2] = {static_cast<unsigned long long>(r.code), r.reason.size()};
  check_mpi(MPI_Bcast(head, 2, MPI_UNSIGNED_LONG_LONG, first, as_comm(comm_)), name_, "MPI_Bcast");
  r.code = static_cast<mlpt_error_code>(head[0]);
  const unsigned long long length = head[1];
  r.reason.resize(static_cast<size_t>(length));
  check_mpi(MPI_Bcast(r.reason.data(), static_cast<int>(length), MPI_CHAR, first, as_comm(comm_)), name_, "MPI_Bcast");
  return r;
#else
  return std::nullopt;
#endif
}

}  // namespace mlpt::ref
