// The GRPO trainer on the device model (device_model/model.hpp), for any DevicePlatform: the step
// of trainer/trainer.hpp (micro-batches, logp_prev pass, loss plan, LM head and GRPO loss gradient
// through the ops, backward with recomputation, global-norm clipping, AdamW on fp32 master weights
// with fp32 moments) with bf16 working weights. The "qwen35_cuda" trainer is this class on a GPU
// (backends/cuda/components/trainer.hpp); on the host platform (device_model/platform.hpp) the
// same code runs in CI with bf16 emulated. Settings: qwen35_cpu's, plus the platform's own keys.
// Exported weights are the fp32 masters in the platform's memory (valid until the next step), or
// host copies under model parallelism or the distributed optimizer (below); states are
// interchangeable with qwen35_cpu's.
//
// Model parallel (settings tensor_parallel, expert_parallel, pipeline_parallel, 1; ABI 1.2 component
// group of dp · tp · ep · pp ranks, trainer/trainer_group.hpp places them): each rank holds its
// shard (model/parallel/shard_weights.hpp; a pipeline stage its layers' tensors, cut as
// model/parallel/pipeline_stages.hpp cuts them). Pipeline stages: pass 1 runs every micro-batch's
// forward through the stages, the last stage's logprobs reaching every stage for the loss plan;
// pass 2 runs the micro-batches that train in the 1F1B order (trainer/pipeline_schedule.hpp: stage
// s holds the layer inputs of at most P - s of them; backwards in micro-batch order, so the same
// bits as one at a time), the trainer passing the residual stream and its gradient between the
// stages (trainer/pipeline_run.hpp, paired send_recv); each stage clips with the whole model's
// norm and updates its own tensors. The model's tensor-parallel
// sums and stage messages run on the platform's device groups made from the group's MPI ones; its
// routed experts are dispatched over the expert group's MPI communicator through host memory
// (device_model/staged_experts.hpp). The ranks of a model-parallel group train the same batch
// share (the group checks it); a replicated tensor's gradient is TP rank 0's (and EP rank 0's) on
// every rank (the device backward's atomics add in another order on each rank; the copies must
// stay equal); the clip norm counts every element once. export_weights returns this rank's shards as ABI 1.2
// sharded tensors, host copies (kDLCPU).
//
// Data parallel, as qwen35_cpu: each of the dp replicas trains its share of the global batch, the
// loss normalised by the global token count (TrainerGroup::plan_loss); the gradients are summed
// over the replicas of each shard on the device, the loss and counts on the host, so clipping and
// AdamW are the same on every replica; the distributed optimizer (optimizer_shards.hpp)
// reduce-scatters the gradients (each replica receives the sum of its ranges), keeps each
// replica's range of the fp32 master weights and Adam moments, steps that range, and gathers each
// updated tensor's ranges on the device, one tensor at a time, into the whole bf16 working copy
// every replica computes with. Every replica exports its weights: with the masters split, the
// working weights widened to fp32 (the policy the model runs; a bf16 engine rounding the masters
// loads the same bits), else the masters themselves. save_state and load_state are collective, the
// first replica writes (trainer_state.hpp): the masters gathered whole on each replica's host (the
// model's files are written from them), the moments lent range by range as each piece is written.
// With the masters split and no model parallelism the trainer also says which exported elements
// changed since its last publish (changed_since_published, for the sparse refit): each step's
// working-copy write ORs a bit per element whose bits changed into device masks (numel / 8 bytes
// per tensor, counted in the memory plan), downloaded once per publish and cleared after it.
//
// moe_parallel_folding (false), as qwen35_cpu (trainer.hpp): the expert-parallel ranks train
// different parts of their replica's share (the host-staged dispatch sends each rank's own rows), the dense
// gradients are summed over their dp · ep replicas on the device instead of agreed on EP rank 0's, and
// padding micro-batches keep every rank in its expert-parallel ranks' dispatches. compute_logprobs
// scores each rank's part likewise, the disjoint parts summed over the expert-parallel ranks.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "device_model/model.hpp"
#include "device_model/platform.hpp"
#include "mlpt/sdk/trainer.hpp"
#include "model/parallel/shard_export.hpp"
#include "model/parallel/shard_weights.hpp"
#include "trainer/optimizer_shards.hpp"
#include "trainer/pipeline_run.hpp"
#include "trainer/trainer_common.hpp"
#include "trainer/trainer_group.hpp"
#include "trainer/trainer_state.hpp"

namespace mlpt::ref {

class DeviceTrainer : public sdk::Trainer {
 public:
  // `component` names it in errors ("trainer qwen35_cuda"); `platform_keys` reads the platform's
  // own settings; `make_platform` is called once they are read, before anything touches a device.
  DeviceTrainer(std::string_view config_json, const mlpt_component_group* group, const std::string& component,
                const std::function<void(Settings&)>& platform_keys,
                const std::function<std::unique_ptr<DevicePlatform>()>& make_platform);
  ~DeviceTrainer() override;

  void train_step(mlpt_train_step_args& args) override;
  void compute_logprobs(mlpt_compute_logprobs_args& args) override;
  void export_weights(mlpt_export_weights_args& args) override;
  void save_state(std::string_view path) override;
  void load_state(std::string_view path) override;
  DataParallel data_parallel() const override {
    return {group_.data_parallel_rank(), group_.data_parallel_size()};
  }
  // Which exported elements changed since the last publish (change masks, below), or nullptr.
  const sdk::ChangedElementsExtension* changed_since_published() override;
  void published(uint64_t version) override;

 private:
  dev::DeviceBatch device_batch(const mlpt_train_batch& b, const MicroBatch& mb) const;
  // A padding micro-batch (padding_micro_batch) under MoE parallel folding.
  dev::DeviceBatch padding_batch() const;
  // Next-token logprobs of a forward's hidden states into out[first_token + t + 1] (host).
  void logprobs_of(const dev::DeviceBatch& db, const bf16* hidden, int64_t first_token, double* out);
  void upload_all(const Weights<float>& w, const Weights<float>& m, const Weights<float>& v);
  // This replica's ranges of `kept` (OptimizerShards::keep_range) in device buffers.
  std::vector<Buffer> upload_ranges(const Weights<float>& kept) const;
  // This replica's ranges of masters or moments on the host (OptimizerShards::keep_range's form).
  Weights<float> host_ranges(const std::vector<Buffer>& ranges) const;
  // Masters or moments whole on the host, every replica's range gathered (collective over the replicas).
  Weights<float> download_ranges(const std::vector<Buffer>& ranges) const;
  // The working weights as fp32 host copies, this rank's layout.
  Weights<float> download_working_weights() const;
  bool sharded() const { return group_.shard().sharded(); }
  // Whether tensor i is trained here: trainable, and held by this pipeline stage (another stage's
  // tensors are empty in this rank's layout).
  bool updated(size_t i) const { return trainable_[i] && weights_.layout.tensors[i].numel() > 0; }
  void agree_on_replicated_gradients();
  // The device group of tensor i's data-parallel replicas (NULL: one): the routed experts' data
  // group, the other tensors' dp · ep ranks under MoE parallel folding.
  Communicator* replicas_of(size_t i) const { return routed_[i] || !dense_ ? data_.get() : dense_.get(); }
  double global_grad_norm();
  Ops& ops() const { return platform_->ops(); }
  // Tensor i's words of the change masks, or NULL when this trainer keeps none.
  uint32_t* change_mask(size_t i) const;

  TrainerSettings settings_;
  TrainerGroup group_;
  std::unique_ptr<DevicePlatform> platform_;  // first made, last gone: every buffer below is its memory
  ModelConfig full_config_;                   // the whole model's (config_ is the shard's)
  // Device groups over the TP, EP, PP and DP groups.
  std::unique_ptr<Communicator> tensor_, expert_, pipeline_, data_;
  std::unique_ptr<Communicator> dense_;  // under MoE parallel folding: the dense tensors' replicas
  std::vector<bool> routed_;             // per tensor: a routed expert tensor
  ModelParallel parallel_;               // the model's groups, when sharded
  std::vector<TensorSpread> spreads_;    // per tensor: how it is split over the model-parallel group
  ModelConfig config_;
  dev::DeviceWeights weights_;          // bf16 / fp32 working copies
  std::vector<Buffer> master_, m_, v_;  // fp32, this replica's range of each layout tensor
  std::vector<Buffer> grads_;           // fp32, whole
  OptimizerShards optimizer_shards_;    // the distributed optimizer's split over the replicas
  std::vector<bool> trainable_;
  dev::WorkspacePtr ws_;
  int64_t valid_vocab_ = 0, step_ = 0;
  uint64_t version_ = 0;
  std::vector<mlpt_metric> metrics_;
  std::vector<mlpt_named_tensor> exported_;
  std::vector<std::vector<int64_t>> exported_shapes_;
  Weights<float> exported_host_;  // sharded or split: the host copy the exports are views of
  ShardExport shard_export_;
  std::vector<PipelineStep> pipeline_steps_;  // the last step's pass 2, as this stage ran it
  // Change masks, kept only where the export is the working weights whole (masters split, no model
  // parallelism: device_model/rank_memory.hpp's keeps_change_masks): a bit per element each step
  // since the last publish rewrote with other bits (the working copy's, so the widened export's),
  // as uint64 words (mlpt/sdk/changed_elements.hpp), tensor after tensor from mask_words_at_.
  bool keeps_change_masks_ = false;
  Buffer change_masks_;
  std::vector<size_t> mask_words_at_;
  std::optional<uint64_t> published_version_;  // none before a first publish and after load_state
  std::vector<uint64_t> host_masks_;           // the masks downloaded for a publish
  std::vector<const uint64_t*> mask_views_;    // into host_masks_, parallel to the exported tensors
  sdk::ChangedElementsExtension changes_{};
};

}  // namespace mlpt::ref
