#include "trainer/trainer_group.hpp"

#include <cmath>
#include <exception>
#include <iterator>
#include <vector>

#include "mlpt/sdk/error.hpp"
#include "mlpt/sdk/plugin.hpp"
#include "mlpt/sdk/types.hpp"
#include "mlpt/sdk/xxhash64.hpp"

#ifdef MLPT_REFERENCE_MPI
#include <mpi.h>

#include "mlpt/sdk/mpi_status.hpp"

#include "model/parallel/mpi_communicator.hpp"
#include "model/parallel/mpi_group.hpp"
#endif

namespace mlpt::ref {

using sdk::Error;

namespace {
#ifdef MLPT_REFERENCE_MPI
MPI_Comm as_comm(void* c) { return static_cast<MPI_Comm>(c); }

void check_mpi(int rc, const std::string& what) { sdk::check_mpi<Error>(rc, "trainer group: " + what); }

#endif

// In-place sums over `comm` (NULL: a group of one, nothing to do), the same bits on every rank
// whatever the group's size: replicas that must hold the same weights add the same gradients, and
// the clip norm's scale is the same on every rank.
template <class T>
void sum_in(void* comm, T* values, size_t count) {
#ifdef MLPT_REFERENCE_MPI
  if (comm) sum_on_every_rank(comm, values, count);
#else
  (void)comm, (void)values, (void)count;
#endif
}
}  // namespace

TrainerGroup::TrainerGroup(const mlpt_component_group* group) {
  if (!group) return;
  sdk::require_struct(group, MLPT_COMPONENT_GROUP_STRUCT_SIZE, "mlpt_component_group");
  name_ = sdk::to_string(group->name);
  rank_ = group->rank, size_ = group->size;
  if (size_ < 1 || rank_ < 0 || rank_ >= size_)
    throw Error(MLPT_INVALID_ARGUMENT, "component_group '" + name_ + "': rank " + std::to_string(rank_) + " of " + std::to_string(size_));
  if (size_ == 1) return;
#ifdef MLPT_REFERENCE_MPI
  comm_ = meet_mpi_group("trainer group", name_, rank_, size_, /*tag=*/0x7472);
#else
  throw Error(MLPT_UNIMPLEMENTED, "trainer group '" + name_ + "' of " + std::to_string(size_) +
                                      " ranks: this mlpt_reference plugin was built without MPI (install libopenmpi-dev and rebuild)");
#endif
}

TrainerGroup::~TrainerGroup() {
  model_.reset();
  pipeline_.reset();
  data_.reset();
  dense_.reset();
  tensor_rows_.reset();
  tensor_.reset();
  expert_.reset();
  routed_.reset();
#ifdef MLPT_REFERENCE_MPI
  for (void* c : {data_comm_, tensor_comm_, expert_comm_, model_comm_, stage_comm_, pipeline_comm_,
                  dense_comm_, comm_}) {
    if (!c) continue;
    MPI_Comm comm = as_comm(c);
    MPI_Comm_free(&comm);
  }
#endif
}

void TrainerGroup::split_model_parallel(int tp, int ep, int etp, int pp, bool vocab_parallel,
                                        bool moe_parallel_folding) {
  if (etp != 1 && etp != tp)
    throw Error(MLPT_INVALID_ARGUMENT, "trainer group '" + name_ + "': expert_tensor_parallel " + std::to_string(etp) +
                                           " is neither 1 (whole experts) nor tensor_parallel " + std::to_string(tp));
  if (tp < 1 || ep < 1 || pp < 1 || size_ % (tp * ep * pp) != 0)
    throw Error(MLPT_INVALID_ARGUMENT, "trainer group '" + name_ + "' of " + std::to_string(size_) +
                                           " ranks does not split into model-parallel groups of tensor_parallel " +
                                           std::to_string(tp) + " × expert_parallel " + std::to_string(ep) +
                                           (pp != 1 ? " × pipeline_parallel " + std::to_string(pp) : std::string()));
  shard_ = ModelShard::of_model_rank(tp, ep, pp, rank_ % (tp * ep * pp), etp);
  shard_.vocab_parallel = vocab_parallel;
  folded_ = moe_parallel_folding && ep > 1;  // with one ep rank folding changes nothing
  if (size_ == 1) return;
#ifdef MLPT_REFERENCE_MPI
  const int dp_rank = rank_ / (tp * ep * pp), stage = dp_rank * pp + shard_.pp_rank;  // stage: of the whole group
  auto split = [&](int color, int key, const char* what) {
    MPI_Comm out = MPI_COMM_NULL;
    check_mpi(MPI_Comm_split(as_comm(comm_), color, key, &out), std::string("MPI_Comm_split (") + what + ")");
    MPI_Comm_set_errhandler(out, MPI_ERRORS_RETURN);
    return static_cast<void*>(out);
  };
  data_comm_ = split(shard_.model_rank(), dp_rank, "data parallel");
  tensor_comm_ = split(stage * ep + shard_.ep_rank, shard_.tp_rank, "tensor parallel");
  expert_comm_ = split(stage * tp + shard_.tp_rank, shard_.ep_rank, "expert parallel");
  stage_comm_ = split(stage, shard_.world_rank(), "pipeline stage");
  pipeline_comm_ = split(dp_rank * tp * ep + shard_.world_rank(), shard_.pp_rank, "pipeline");
  // The model's and the device gradients' communicators own duplicates; the raw ones carry the double sums here.
  auto communicator = [&](void* c) {
    MPI_Comm dup = MPI_COMM_NULL;
    check_mpi(MPI_Comm_dup(as_comm(c), &dup), "MPI_Comm_dup");
    return std::make_unique<MpiCommunicator>(static_cast<void*>(dup));
  };
  model_comm_ = split(dp_rank, shard_.model_rank(), "model parallel");
  model_ = communicator(model_comm_);
  if (tp > 1) tensor_ = communicator(tensor_comm_);
  if (ep > 1) expert_ = communicator(expert_comm_);
  if (shard_.routed_rows_whole_on_tp_ranks()) routed_ = communicator(stage_comm_);
  if (pp > 1) pipeline_ = communicator(pipeline_comm_);
  if (size_ > tp * ep * pp) data_ = communicator(data_comm_);
  parallel_ = ModelParallel{tensor_.get(), expert_.get(), routed_.get(), pipeline_.get()};
  if (folded_) {
    // The dense tensors' replicas: this tensor-parallel place of this stage in every share.
    dense_comm_ = split(shard_.pp_rank * tp + shard_.tp_rank, batch_share(), "dense replicas");
    dense_ = communicator(dense_comm_);
    // Whole expert rows (etp = 1) are shared by the TP ranks only; with etp = tp each TP rank
    // dispatches its own copy of its rows over its expert group.
    if (etp == 1 && tp > 1) tensor_rows_ = communicator(tensor_comm_);
    parallel_.folded = true;
    parallel_.tensor_rows = tensor_rows_.get();
  }
#endif
}

void TrainerGroup::sum_tensor_parallel(double* values, size_t count) const { sum_in(tensor_comm_, values, count); }
void TrainerGroup::sum_expert_parallel(double* values, size_t count) const { sum_in(expert_comm_, values, count); }
void TrainerGroup::sum_pipeline(double* values, size_t count) const {
  if (shard_.pp > 1) sum_in(pipeline_comm_, values, count);
}

// The batch shares' ranks: one rank per share.
void TrainerGroup::sum(float* values, size_t count) const {
  sum_in(folded_ ? dense_comm_ : data_comm_ ? data_comm_ : comm_, values, count);
}
void TrainerGroup::sum(double* values, size_t count) const {
  sum_in(folded_ ? dense_comm_ : data_comm_ ? data_comm_ : comm_, values, count);
}

OptimizerShards TrainerGroup::optimizer_shards(const ModelLayout& layout, bool distributed) const {
  if (!distributed) return {};
  if (!folded_) return OptimizerShards(data_parallel_size(), data_parallel_rank(), data_.get());
  return OptimizerShards(ReplicaSplit(batch_shares(), batch_share()), dense_.get(),
                         ReplicaSplit(data_parallel_size(), data_parallel_rank()), data_.get(),
                         routed_expert_tensors(layout));
}

double TrainerGroup::global_norm(double squares[3]) const {
  if (shard_.routed_rows_whole_on_tp_ranks()) {  // whole experts over the stage's ranks
    sum_in(stage_comm_, &squares[2], 1);
    sum_tensor_parallel(&squares[1], 1);
  } else {  // expert blocks over the ep ranks, their columns over the tp ranks
    sum_expert_parallel(&squares[2], 1);
    sum_tensor_parallel(&squares[1], 2);
  }
  sum_pipeline(squares, 3);  // each stage's tensors, once
  return std::sqrt(squares[0] + squares[1] + squares[2]);
}

void TrainerGroup::sum_replicas(bool routed_experts, float* values, size_t count) const {
  if (routed_experts)
    sum_in(data_comm_ ? data_comm_ : comm_, values, count);
  else
    sum(values, count);
}

void TrainerGroup::sum_replica_squares(double squares[3]) const {
  sum(squares, 2);                                          // replicated and tensor-split: the dense replicas
  sum_in(data_comm_ ? data_comm_ : comm_, &squares[2], 1);  // routed experts: their data-parallel replicas
}

int64_t TrainerGroup::most_over_folded_shares(int64_t value) const {
  if (!folded_) return value;
#ifdef MLPT_REFERENCE_MPI
  long long most = value;
  check_mpi(MPI_Allreduce(MPI_IN_PLACE, &most, 1, MPI_LONG_LONG, MPI_MAX, as_comm(expert_comm_)),
            "MPI_Allreduce (max)");
  return static_cast<int64_t>(most);
#else
  return value;
#endif
}

int64_t TrainerGroup::sum(int64_t value) const {
  double v = static_cast<double>(value);  // exact below 2^53
  sum(&v, 1);
  return static_cast<int64_t>(v);
}

LossPlan TrainerGroup::plan_loss(const mlpt_train_step_args& args, const std::vector<double>& logp_prev,
                                 const LossSettings& settings) const {
  const int64_t global_loss_tokens =
      sdk::has_field(args, MLPT_STRUCT_SIZE(mlpt_train_step_args, global_num_loss_tokens)) ? args.global_num_loss_tokens : 0;
  return ref::plan_loss(*args.batch, logp_prev, settings, global_loss_tokens, [this](int64_t n) { return sum(n); });
}

void TrainerGroup::sum_step_totals(double& loss, LossPlan& plan, StepWork& work) const {
  if (batch_shares() == 1) return;
  double totals[] = {loss,
                     static_cast<double>(plan.num_tokens),
                     static_cast<double>(plan.sequences),
                     static_cast<double>(plan.truncated),
                     static_cast<double>(plan.logprob_error_masked),
                     static_cast<double>(plan.tis_masked),
                     static_cast<double>(work.forward_tokens),
                     static_cast<double>(work.backward_tokens),
                     static_cast<double>(work.head_rows),
                     static_cast<double>(work.shared_prefix_tokens)};
  sum(totals, std::size(totals));
  loss = totals[0];
  plan.num_tokens = static_cast<int64_t>(totals[1]), plan.sequences = static_cast<int64_t>(totals[2]);
  plan.truncated = static_cast<int64_t>(totals[3]), plan.logprob_error_masked = static_cast<int64_t>(totals[4]);
  plan.tis_masked = static_cast<int64_t>(totals[5]);
  work.forward_tokens = static_cast<int64_t>(totals[6]), work.backward_tokens = static_cast<int64_t>(totals[7]);
  work.head_rows = static_cast<int64_t>(totals[8]), work.shared_prefix_tokens = static_cast<int64_t>(totals[9]);
}

// The ranks of a model-parallel group hold parts of one model and must train the same batch share:
// with different shares each rank would compute a different model's step and the sums would mix
// them silently. Each rank compares its share's fingerprint with the group's (a sum of equal values
// is the count times the value), so every rank of a mismatched group refuses, and none waits.
void TrainerGroup::check_same_share(const mlpt_train_batch& b) const {
  const int64_t n = b.offsets[b.num_sequences];
  uint64_t h = sdk::xxhash64(b.offsets, sizeof(int64_t) * (b.num_sequences + 1));
  h = sdk::xxhash64(b.tokens, sizeof(int32_t) * n, h);
  h = sdk::xxhash64(b.advantages, sizeof(float) * b.num_sequences, h);
  const double mine[2] = {double(h >> 40), double((h >> 16) & 0xFFFFFF)};  // exact in a double, and in sums
  double tensor[2] = {mine[0], mine[1]}, expert[2] = {mine[0], mine[1]}, stages[2] = {mine[0], mine[1]};
  sum_tensor_parallel(tensor, 2);
  sum_expert_parallel(expert, 2);
  sum_pipeline(stages, 2);
  const int tp = shard().tp, ep = shard().ep, pp = shard().pp;
  const std::string stage_text = pp > 1 ? " x pipeline_parallel " + std::to_string(pp) : "";
  for (int i = 0; i < 2; ++i)
    if (tensor[i] != tp * mine[i] || expert[i] != ep * mine[i] || stages[i] != pp * mine[i])
      throw Error(
          MLPT_INVALID_ARGUMENT,
          "trainer group rank " + std::to_string(rank_) +
              ": the ranks of its model-parallel group (tensor_parallel " + std::to_string(tp) +
              " x expert_parallel " + std::to_string(ep) + stage_text +
              (folded_ ? ", moe_parallel_folding" : "") +
              ") were given different batch shares; every rank of such a group must train the same share "
              "(split the batch by the data-parallel rank the trainer reports)");
}

StateRanks TrainerGroup::state_ranks(const ModelConfig& full) const {
  StateRanks ranks{
      full, shard_, model_group(), data_parallel_rank() == 0, rank_, batch_shares(), [this](bool ok) {
        return all_ok(ok);
      }};
  ranks.moe_folding = folded_;
  return ranks;
}

TrainerState TrainerGroup::load_state(const std::string& path, const Weights<float>& current,
                                      const ModelConfig& full, const OptimizerShards& moments) const {
  TrainerState st;
  std::exception_ptr error;
  try {
    StateRanks ranks = state_ranks(full);
    ranks.moments = moments;
    st = load_trainer_state(path, current, ranks);
  } catch (...) {
    error = std::current_exception();
  }
  if (!all_ok(!error)) {
    if (error) std::rethrow_exception(error);
    throw Error(MLPT_ABORTED, "load_state " + path +
                                  ": another rank of the trainer group could not read its part (its error says why); "
                                  "the state is unchanged");
  }
  return st;
}

bool TrainerGroup::all_ok(bool ok) const {
  double failed = ok ? 0.0 : 1.0;
  sum_in(comm_, &failed, 1);
  return failed == 0.0;
}

void TrainerGroup::barrier() const {
#ifdef MLPT_REFERENCE_MPI
  if (comm_) check_mpi(MPI_Barrier(as_comm(comm_)), "MPI_Barrier");
#endif
}

}  // namespace mlpt::ref
