// The trainer component "qwen35_cuda" (mlpt/trainer.h) on the CUDA backend: the step of
// trainer/trainer.hpp (micro-batches, logp_prev pass, loss plan, LM head and GRPO loss gradient
// on the device, backward with recomputation, global-norm clipping, AdamW on fp32 master weights
// with fp32 moments) with bf16 working weights on one GPU. Same settings as qwen35_cpu plus
// "device" (CUDA ordinal, 0); "threads" is accepted and unused. Exported weights are the fp32
// masters as CUDA tensors (kDLCUDA, valid until the next step); states are interchangeable with
// qwen35_cpu's.
//
// Model parallel (settings tensor_parallel, expert_parallel, 1; ABI 1.2 component group of dp ·
// tp · ep ranks, trainer/trainer_group.hpp places them): each rank holds its shard
// (model/parallel/shard_weights.hpp) on its GPU. The model's tensor-parallel sums run on a device
// communicator made from the group's MPI one (backends/cuda/parallel/device_communicator.hpp:
// NCCL where each rank has a GPU of its own, else host-staged MPI, so the ranks may share a GPU);
// its routed experts are dispatched over the expert group's MPI communicator through host memory
// (backends/cuda/model.hpp). The ranks of a model-parallel group train the same batch share (the
// group checks it); a replicated tensor's gradient is TP rank 0's (and EP rank 0's) on every rank
// (the device backward's atomics add in another order on each rank; the copies must stay equal);
// the clip norm counts every element once. export_weights returns this rank's shards as ABI 1.2
// sharded tensors, host copies (kDLCPU) of the master weights.
//
// Data parallel, as qwen35_cpu: each of the dp replicas trains its share of the global batch, the
// loss normalised by the global token count (TrainerGroup::plan_loss); the gradients are summed
// over the replicas of each shard on the device (a device communicator over the data-parallel
// group, as above), the loss and counts on the host, so clipping and AdamW are the same on every
// replica. Every replica exports its weights; save_state and load_state are collective, the first
// replica writes (trainer_state.hpp).
#pragma once

#include <string>
#include <vector>

#include "backends/cuda/context.hpp"
#include "backends/cuda/model.hpp"
#include "backends/cuda/parallel/device_communicator.hpp"
#include "model/parallel/shard_export.hpp"
#include "model/parallel/shard_weights.hpp"
#include "trainer/trainer_common.hpp"
#include "trainer/trainer_group.hpp"
#include "trainer/trainer_state.hpp"
#include "mlpt/sdk/trainer.hpp"

namespace mlpt::ref::cuda {

class CudaTrainer final : public sdk::Trainer {
 public:
  explicit CudaTrainer(std::string_view config_json, const mlpt_component_group* group = nullptr);
  ~CudaTrainer() override;

  void train_step(mlpt_train_step_args& args) override;
  void compute_logprobs(mlpt_compute_logprobs_args& args) override;
  void export_weights(mlpt_export_weights_args& args) override;
  void save_state(std::string_view path) override;
  void load_state(std::string_view path) override;
  DataParallel data_parallel() const override { return {group_.data_parallel_rank(), group_.data_parallel_size()}; }

 private:
  DeviceBatch device_batch(const mlpt_train_batch& b, const MicroBatch& mb) const;
  // Next-token logprobs of a forward's hidden states into out[first_token + t + 1] (host).
  void logprobs_of(const DeviceBatch& db, const bf16* hidden, int64_t first_token, double* out);
  void upload_all(const Weights<float>& w, const Weights<float>& m, const Weights<float>& v);
  Weights<float> download(const std::vector<DeviceBuffer>& tensors) const;
  bool sharded() const { return group_.shard().sharded(); }
  // Replicated tensors' gradients made TP rank 0's (and EP rank 0's) on every rank; the global
  // norm of the trainable gradients, every element of the whole model counted once.
  void agree_on_replicated_gradients();
  double global_grad_norm();

  TrainerSettings settings_;
  TrainerGroup group_;
  int device_ = 0;
  Context ctx_;
  ModelConfig full_config_;               // the whole model's (config_ is the shard's)
  DeviceCommunicator tensor_;             // the TP group on the device, when tp > 1
  DeviceCommunicator expert_;             // the EP group on the device (replicated gradients), when ep > 1
  DeviceCommunicator data_;               // the data-parallel replicas of this shard, when several
  ModelParallel parallel_;                // the model's groups, when sharded
  std::vector<TensorSpread> spreads_;     // per tensor: how it is split over the model-parallel group
  ModelConfig config_;
  DeviceWeights weights_;                             // bf16 / fp32 working copies
  std::vector<DeviceBuffer> master_, m_, v_, grads_;  // fp32, one per layout tensor
  std::vector<bool> trainable_;
  WorkspacePtr ws_;
  int64_t valid_vocab_ = 0, step_ = 0;
  uint64_t version_ = 0;
  std::vector<mlpt_metric> metrics_;
  std::vector<mlpt_named_tensor> exported_;
  std::vector<std::vector<int64_t>> exported_shapes_;
  Weights<float> exported_masters_;  // under TP: the host copy the shards are views of
  ShardExport shard_export_;
};

}  // namespace mlpt::ref::cuda
