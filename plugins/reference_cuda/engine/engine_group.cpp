#include "engine/engine_group.hpp"

#include <climits>
#include <memory>

#include "mlpt/sdk/plugin.hpp"

#ifdef MLPT_REFERENCE_MPI
#include <mpi.h>

#include "model/parallel/group_failure.hpp"
#include "model/parallel/mpi_communicator.hpp"
#include "model/parallel/mpi_group.hpp"
#include "mlpt/sdk/mpi_status.hpp"
#endif

namespace mlpt::ref {

using sdk::Error;

namespace {
#ifdef MLPT_REFERENCE_MPI
MPI_Comm as_comm(void* c) { return static_cast<MPI_Comm>(c); }

void check_mpi(int rc, const std::string& group, const std::string& what) {
  sdk::check_mpi<Error>(rc, "engine group '" + group + "': " + what);
}

// MPI_Bcast that gives up when a rank of the group fails (group_failure.hpp).
void broadcast(void* comm, GroupFailure& failure, const std::string& group, void* data, int count, MPI_Datatype type, int root) {
  MPI_Request request = MPI_REQUEST_NULL;
  check_mpi(MPI_Ibcast(data, count, type, root, as_comm(comm), &request), group, "MPI_Ibcast");
  failure.wait(&request, "MPI_Ibcast");
}

// Test only (engine setting test_only_fail_at_collective = n): throws instead of making this rank's
// n-th collective of the model (counted over its tensor- and expert-parallel communicators), as a
// rank that fails halfway through a step, after n - 1 collectives, does.
class FailingCommunicator final : public Communicator {
 public:
  FailingCommunicator(std::unique_ptr<Communicator> inner, std::shared_ptr<int64_t> left) : inner_(std::move(inner)), left_(std::move(left)) {}
  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  void all_reduce_sum(float* values, size_t count) override { count_one(), inner_->all_reduce_sum(values, count); }
  void all_to_all_v(const float* send, const size_t* send_counts, float* recv, const size_t* recv_counts) override {
    count_one(), inner_->all_to_all_v(send, send_counts, recv, recv_counts);
  }
  void all_gather_v(const float* send, size_t send_count, float* recv, const size_t* recv_counts) override {
    count_one(), inner_->all_gather_v(send, send_count, recv, recv_counts);
  }
  void exchange_counts(const size_t* send_counts, size_t* recv_counts) override { count_one(), inner_->exchange_counts(send_counts, recv_counts); }

 private:
  void count_one() {
    if (--*left_ == 0) throw Error(MLPT_INTERNAL, "test-only fault (engine setting test_only_fail_at_collective): a collective not made");
  }
  std::unique_ptr<Communicator> inner_;
  std::shared_ptr<int64_t> left_;
};
#endif
}  // namespace

EngineGroup::EngineGroup(const mlpt_component_group* group, int tp, int ep, int etp, EngineTestFault fault) {
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
  if (etp != 1 && etp != tp)
    throw Error(MLPT_INVALID_ARGUMENT, "engine setting expert_tensor_parallel " + std::to_string(etp) +
                                           " is neither 1 (whole experts) nor tensor_parallel " + std::to_string(tp));
  shard_ = ModelShard::of_world_rank(tp, ep, rank_, etp);
  if (size_ == 1) return;
#ifdef MLPT_REFERENCE_MPI
  MPI_Comm comm = as_comm(meet_mpi_group("engine group", name_, rank_, size_, /*tag=*/0x656e));
  comm_ = comm;
  failure_ = std::make_shared<GroupFailure>(comm_, "engine group '" + name_ + "'");
  // The model's communicators: the tp ranks of this rank's ep_rank, the ep ranks of its tp_rank;
  // their waits give up when a rank of the group fails.
  const int64_t fail_at_collective = fault.rank < 0 || fault.rank == rank_ ? fault.at_collective : 0;
  auto left = std::make_shared<int64_t>(fail_at_collective);
  auto split = [&](int color, int key_in_group, const char* what) -> std::unique_ptr<Communicator> {
    MPI_Comm out = MPI_COMM_NULL;
    check_mpi(MPI_Comm_split(comm, color, key_in_group, &out), name_, std::string("MPI_Comm_split (") + what + ")");
    auto made = std::make_unique<MpiCommunicator>(static_cast<void*>(out), failure_.get());
    if (fail_at_collective > 0) return std::make_unique<FailingCommunicator>(std::move(made), left);
    return made;
  };
  tensor_ = split(shard_.ep_rank, shard_.tp_rank, "tensor parallel");
  expert_ = split(shard_.tp_rank, shard_.ep_rank, "expert parallel");
  if (shard_.routed_rows_whole_on_tp_ranks()) routed_ = split(0, rank_, "routed experts");  // the whole group
  if (tp == 1) tensor_.reset();
  if (ep == 1) expert_.reset();
  parallel_ = ModelParallel{tensor_.get(), expert_.get(), routed_.get()};
#else
  throw Error(MLPT_UNIMPLEMENTED, "engine group '" + name_ + "' of " + std::to_string(size_) +
                                      " ranks: this mlpt_reference plugin was built without MPI (install libopenmpi-dev and rebuild)");
#endif
}

EngineGroup::~EngineGroup() {
  tensor_.reset();
  expert_.reset();
  routed_.reset();
  failure_.reset();  // after the communicators that wait through it
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
  failure_->check();  // a broken group is told nothing more
  broadcast(comm_, *failure_, name_, &bytes, 1, MPI_UNSIGNED_LONG_LONG, 0);
  broadcast(comm_, *failure_, name_, const_cast<char*>(message.data()), static_cast<int>(bytes), MPI_CHAR, 0);
#endif
}

std::vector<char> EngineGroup::receive() {
  if (rank_ == 0) throw Error(MLPT_INTERNAL, "engine group '" + name_ + "': rank 0 does not receive");
  std::vector<char> message;
#ifdef MLPT_REFERENCE_MPI
  unsigned long long bytes = 0;
  broadcast(comm_, *failure_, name_, &bytes, 1, MPI_UNSIGNED_LONG_LONG, 0);  // an idle rank 0 keeps this rank waiting here
  message.resize(static_cast<size_t>(bytes));
  broadcast(comm_, *failure_, name_, message.data(), static_cast<int>(bytes), MPI_CHAR, 0);
#endif
  return message;
}

std::optional<EngineGroup::Refusal> EngineGroup::first_refusal(mlpt_error_code code, const std::string& mine) {
  if (size_ == 1) return mine.empty() ? std::nullopt : std::optional<Refusal>(Refusal{0, code, mine});
#ifdef MLPT_REFERENCE_MPI
  int first = mine.empty() ? size_ : rank_;
  MPI_Request request = MPI_REQUEST_NULL;
  check_mpi(MPI_Iallreduce(MPI_IN_PLACE, &first, 1, MPI_INT, MPI_MIN, as_comm(comm_), &request), name_, "MPI_Iallreduce");
  failure_->wait(&request, "MPI_Iallreduce");
  if (first == size_) return std::nullopt;
  Refusal r{first, code, first == rank_ ? mine : std::string()};
  unsigned long long head[2] = {static_cast<unsigned long long>(r.code), r.reason.size()};
  broadcast(comm_, *failure_, name_, head, 2, MPI_UNSIGNED_LONG_LONG, first);
  r.code = static_cast<mlpt_error_code>(head[0]);
  const unsigned long long length = head[1];
  r.reason.resize(static_cast<size_t>(length));
  broadcast(comm_, *failure_, name_, r.reason.data(), static_cast<int>(length), MPI_CHAR, first);
  return r;
#else
  return std::nullopt;
#endif
}

void EngineGroup::report_failure(const std::string& why) {
#ifdef MLPT_REFERENCE_MPI
  if (failure_) failure_->report(why);
#else
  (void)why;  // a group of one: nobody waits for this rank
#endif
}

}  // namespace mlpt::ref
