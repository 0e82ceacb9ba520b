// The trainer component "qwen35_cuda" (mlpt/trainer.h) on the CUDA backend: the step of
// trainer/trainer.hpp (micro-batches, logp_prev pass, loss plan, LM head and GRPO loss gradient
// on the device, backward with recomputation, global-norm clipping, AdamW on fp32 master weights
// with fp32 moments) with bf16 working weights on one GPU. Same settings as qwen35_cpu plus
// "device" (CUDA ordinal, 0); "threads" is accepted and unused. Exported weights are the fp32
// masters as CUDA tensors (kDLCUDA, valid until the next step); states are interchangeable with
// qwen35_cpu's.
#pragma once

#include <string>
#include <vector>

#include "backends/cuda/context.hpp"
#include "backends/cuda/model.hpp"
#include "trainer/trainer_common.hpp"
#include "mlpt/sdk/trainer.hpp"

namespace mlpt::ref::cuda {

class CudaTrainer final : public sdk::Trainer {
 public:
  explicit CudaTrainer(std::string_view config_json);
  ~CudaTrainer() override;

  void train_step(mlpt_train_step_args& args) override;
  void compute_logprobs(mlpt_compute_logprobs_args& args) override;
  void export_weights(mlpt_export_weights_args& args) override;
  void save_state(std::string_view path) override;
  void load_state(std::string_view path) override;

 private:
  DeviceBatch device_batch(const mlpt_train_batch& b, const MicroBatch& mb) const;
  // Next-token logprobs of a forward's hidden states into out[first_token + t + 1] (host).
  void logprobs_of(const DeviceBatch& db, const bf16* hidden, int64_t first_token, double* out);
  void upload_all(const Weights<float>& w, const Weights<float>& m, const Weights<float>& v);
  Weights<float> download(const std::vector<DeviceBuffer>& tensors) const;

  TrainerSettings settings_;
  int device_ = 0;
  Context ctx_;
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
};

}  // namespace mlpt::ref::cuda
