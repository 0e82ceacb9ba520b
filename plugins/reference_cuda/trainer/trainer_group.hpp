// The trainer's data-parallel group (mlpt_component_group, ABI 1.2): every rank trains its share of
// the step's global batch, and the ranks sum their gradients, loss and counts over MPI, so each
// applies the same AdamW update and holds the same weights. A group of one needs nothing. A larger
// group needs a process started by an MPI launcher (the host initialises MPI) and a plugin built
// with MPI; its ranks find each other through the host's key-value store (each puts its MPI world
// rank under "<group>/world_rank/<r>") and build their own communicator from those ranks only.
//
// Model parallelism (trainer settings tensor_parallel, expert_parallel, pipeline_parallel): the
// group of dp · tp · ep · pp ranks is cut into dp model-parallel groups of tp · ep · pp neighbours
// (group rank dp_rank · tp · ep · pp + the ModelShard's model rank: a stage's tp · ep ranks are
// neighbours, the stages follow each other); the ranks of one model-parallel group hold the shards
// of one model and train the same batch share. sum() then sums over the dp replicas of this rank's
// shard only.
//
// MoE parallel folding (trainer setting moe_parallel_folding, as Megatron-Core folds expert
// parallelism over data parallelism): the same placement, but the ep dimension is data-parallel
// for everything except the routed experts. The tp · pp ranks of one ep rank of a model-parallel
// group train one batch share; its ep ranks train different shares. The host still sees dp
// replicas of tp · ep · pp ranks (the ABI's replica is a group whose ranks together hold every
// tensor: the first one publishes the weights) and gives each rank of a replica its share; the ep
// ranks cut it into ep parts (batch_part.hpp) and each trains its own (share dp_rank · ep +
// ep_rank of the dp · ep the group trains). The routed experts stay split over the
// stage's ranks (expert_dispatch.hpp sends each rank's own tokens to their owners); the other
// tensors' gradients are summed over their dp · ep replicas (the ranks of the same tensor-parallel
// place in the same stage), the routed experts' over their dp replicas, and the distributed
// optimizer splits each tensor over those replicas (optimizer_shards.hpp). Expert tensor
// parallelism 1 or tp alike: with tp the expert groups already hold their own tokens.
//
// What both trainers (CPU, CUDA) do alike under data parallelism lives here too: the loss plan
// normalised over the global batch, and the step's loss and counts summed over the replicas.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "mlpt/mlpt.h"
#include "mlpt/trainer.h"
#include "model/parallel/communicator.hpp"
#include "model/parallel/model_parallel.hpp"
#include "trainer/grpo_loss.hpp"
#include "trainer/optimizer_shards.hpp"
#include "trainer/trainer_common.hpp"
#include "trainer/trainer_state.hpp"

namespace mlpt::ref {

class TrainerGroup {
 public:
  explicit TrainerGroup(const mlpt_component_group* group);  // NULL: a group of one
  ~TrainerGroup();
  TrainerGroup(const TrainerGroup&) = delete;
  TrainerGroup& operator=(const TrainerGroup&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }

  // Splits the group into model-parallel groups of tp × ep × pp ranks (once, before any sum), routed
  // experts with expert tensor parallelism etp (1 or tp: model_parallel.hpp), pp pipeline stages.
  // Throws MLPT_INVALID_ARGUMENT naming the settings when the group's size is not a multiple of
  // tp · ep · pp. vocab_parallel false: the embedding and LM head whole on every rank
  // (ModelShard::vocab_parallel); both trainers split them.
  // moe_parallel_folding: the ep ranks train different batch shares (above).
  void split_model_parallel(int tp, int ep, int etp = 1, int pp = 1, bool vocab_parallel = true,
                            bool moe_parallel_folding = false);
  const ModelShard& shard() const { return shard_; }
  const ModelParallel& model_parallel() const { return parallel_; }
  int model_parallel_size() const { return shard_.tp * shard_.ep * shard_.pp; }
  int data_parallel_rank() const { return rank_ / model_parallel_size(); }
  int data_parallel_size() const { return size_ / model_parallel_size(); }
  bool moe_parallel_folding() const { return folded_; }
  // The batch shares the group trains and this rank's: the data-parallel replicas (what the host
  // splits the batch by), times the expert-parallel ranks under MoE parallel folding, each ep rank
  // training part batch_part() of batch_parts() of its replica's share (batch_part.hpp).
  int batch_shares() const { return folded_ ? data_parallel_size() * shard_.ep : data_parallel_size(); }
  int batch_share() const {
    return folded_ ? data_parallel_rank() * shard_.ep + shard_.ep_rank : data_parallel_rank();
  }
  int batch_parts() const { return folded_ ? shard_.ep : 1; }
  int batch_part() const { return folded_ ? shard_.ep_rank : 0; }
  // The distributed optimizer's split of each tensor of `layout` (this rank's) over its replicas,
  // with their groups (optimizer_shards.hpp); one replica keeps everything when not `distributed`.
  OptimizerShards optimizer_shards(const ModelLayout& layout, bool distributed) const;
  // The replicas of this rank's dense (not routed-expert) tensors, one rank per batch share (rank =
  // batch_share()): the data-parallel group, or under folding dp · ep ranks; NULL when one.
  Communicator* dense_replica_group() const { return folded_ ? dense_.get() : data_.get(); }
  // The tp · ep · pp ranks of this rank's model-parallel group (rank = ModelShard::model_rank());
  // NULL when the trainer is not model-parallel.
  Communicator* model_group() const { return model_.get(); }
  // The data-parallel replicas of this rank's shard (rank = data_parallel_rank()), for gradient
  // sums in another memory (a device communicator made from it); NULL when there is one replica.
  Communicator* data_parallel_group() const { return data_.get(); }
  // Sums in double over this rank's tensor-parallel (resp. expert-parallel) group, in place, the
  // same bits on every rank.
  void sum_tensor_parallel(double* values, size_t count) const;
  void sum_expert_parallel(double* values, size_t count) const;
  // The same over this rank's pipeline group (its place in every stage): what one stage computed
  // (the others adding zeros) reaches every stage.
  void sum_pipeline(double* values, size_t count) const;
  // The L2 norm of the whole model's gradient from this rank's sums of squares by TensorSpread
  // (shard_weights.hpp: replicated, tensor_split, routed_experts; kv_copy counts nowhere), each summed over the groups its
  // tensors are split over so every element counts once, then over the pipeline stages (each holds
  // its own tensors); the same bits on every rank. Collective.
  double global_norm(double squares[3]) const;

  // Element-wise sums over the batch shares (one rank each: the data-parallel replicas of this
  // rank's shard, under MoE parallel folding of its dense tensors; the whole group when there is
  // no model parallelism), in place; every rank gets the same bits.
  void sum(float* values, size_t count) const;
  void sum(double* values, size_t count) const;
  int64_t sum(int64_t value) const;
  // A gradient summed over its replicas, in place: a routed expert tensor's (`routed_experts`)
  // over the data-parallel replicas of this shard, any other over the batch shares (sum()).
  void sum_replicas(bool routed_experts, float* values, size_t count) const;
  // The sums of squares of each replica's ranges (global_norm's, by TensorSpread) over the
  // replicas of each kind of tensor, so every element counts once (collective).
  void sum_replica_squares(double squares[3]) const;
  // Under MoE parallel folding, the most `value` is on any of this rank's expert-parallel ranks
  // (collective over them): how many forwards and backwards each of them runs, so every rank
  // takes part in the same number of expert dispatches. `value` itself otherwise.
  int64_t most_over_folded_shares(int64_t value) const;

  // The loss plan of this replica's share (grpo_loss.hpp): N_tok from the step's global count of
  // loss tokens (args.global_num_loss_tokens, when the host passed it) less what the logprob error
  // mask removed on any replica, so the update equals the one-rank step's on the whole batch.
  // Collective over the data-parallel replicas.
  LossPlan plan_loss(const mlpt_train_step_args& args, const std::vector<double>& logp_prev,
                     const LossSettings& settings) const;
  // The step's loss and counts (plan, work) summed over the data-parallel replicas, in place, so
  // every replica reports the whole batch's metrics; nothing to do with one replica.
  void sum_step_totals(double& loss, LossPlan& plan, StepWork& work) const;
  // What save_trainer_state and load_trainer_state need of this rank (trainer_state.hpp); `full` is
  // the whole model's config.
  StateRanks state_ranks(const ModelConfig& full) const;
  // load_trainer_state of this rank's slices, collective: every rank gets its state, or every rank
  // throws (a rank that could not read its part its own error, the others MLPT_ABORTED), so the
  // group keeps its old state unless all of them could read theirs.
  // With `moments` split, m and v come back as this replica's ranges (trainer_state.hpp).
  TrainerState load_state(const std::string& path, const Weights<float>& current, const ModelConfig& full,
                          const OptimizerShards& moments = {}) const;
  // The ranks of a model-parallel group hold parts of one model and must be given the same batch
  // share (under MoE parallel folding too: the ep ranks cut it afterwards): throws
  // MLPT_INVALID_ARGUMENT on every rank of a group given different shares (collective over the
  // tensor-, expert- and pipeline-parallel groups).
  void check_same_share(const mlpt_train_batch& b) const;
  // Whether every rank of the group passed ok = true (collective: a rank that failed still calls
  // it, so none waits for it).
  bool all_ok(bool ok) const;
  // Returns once every rank has arrived.
  void barrier() const;

 private:
  std::string name_;
  int rank_ = 0, size_ = 1;
  void* comm_ = nullptr;  // the group's MPI communicator, when size_ > 1
  void* data_comm_ = nullptr, *tensor_comm_ = nullptr, *expert_comm_ = nullptr, *model_comm_ = nullptr;  // after a split
  void* stage_comm_ = nullptr, *pipeline_comm_ = nullptr;
  void* dense_comm_ = nullptr;  // under MoE parallel folding: the dense tensors' dp · ep replicas
  bool folded_ = false;
  ModelShard shard_;
  std::unique_ptr<Communicator> tensor_, expert_;  // what the model's forward and backward use
  std::unique_ptr<Communicator> model_;            // what a sharded save gathers tensors over
  std::unique_ptr<Communicator> routed_;           // the routed experts' group under etp = 1, tp > 1
  std::unique_ptr<Communicator> pipeline_;         // the stages' activations, point to point
  std::unique_ptr<Communicator> data_;             // the replicas of this shard, when more than one
  std::unique_ptr<Communicator> dense_;            // under folding: the dense replicas, when more than one
  std::unique_ptr<Communicator> tensor_rows_;      // under folding: the TP ranks sharing this rank's rows
  ModelParallel parallel_;
};

}  // namespace mlpt::ref
