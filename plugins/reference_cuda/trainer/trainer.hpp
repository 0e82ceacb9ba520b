// The trainer component "qwen35_cpu" (mlpt/trainer.h) on the CPU backend: the whole model's
// backward, the GRPO loss (trainer/grpo_loss.hpp), AdamW on fp32 master weights, R3 replay.
//
// A step: the batch is cut into micro-batches of at most micro_batch_tokens computed tokens (whole
// sequences; sequences that cannot change the weights — zero advantage, truncated — form their own
// micro-batches; a prefix that consecutive sequences share is computed once per micro-batch and
// forked to them, trainer/shared_prefix.hpp); each is run forward once to get logp_prev, the output
// head only on the rows whose next token is scored, keeping only the experts it used; the loss plan
// (masks, N_tok over the global batch) is made; then each micro-batch whose loss has a gradient
// runs forward again (replaying those experts: the same bits) keeping its layer inputs, the head's
// loss gradient and the backward (recomputing each layer from its saved input), in the 1F1B order
// (below); gradients accumulate in micro-batch order; global-norm clipping; one AdamW update, which
// still moves the weights through the AdamW moments when the gradient is zero.
//
// Settings (JSON, unknown keys are errors): checkpoint (required), threads (1), micro_batch_tokens
// (8192), share_prefixes (true; false computes every sequence whole), sampling_vocab_size (as the engine:
// from tokenizer.json), optimizer {lr 1e-6, betas [0.9, 0.999], eps 1e-8, weight_decay 0, grad_clip 0.125,
// freeze_router true}, loss {tis_min 0.999, tis_max 1.002, logprob_error_max 2.0, ppo_clip false, clip_low
// 0.2, clip_high 0.28, kl_coef 0 (only 0: no reference policy is kept)}.
//
// Data parallel (ABI 1.2 component group, trainer/trainer_group.hpp): each rank steps on its share
// of the global batch; the ranks sum the logprob-error-masked token count (for N_tok), then the
// loss and counts (each sum the same bits on every rank); the gradients are reduce-scattered, each
// replica updating its ranges and the replicas gathering the weights (the distributed optimizer,
// trainer/optimizer_shards.hpp; setting distributed_optimizer, default true; false all-reduces
// them and every replica updates everything), so every rank holds the same weights.
//
// Model parallel (settings tensor_parallel, expert_parallel, pipeline_parallel; default 1,
// trainer_group.hpp places the ranks; pipeline stages run the training pass in the device
// trainer's 1F1B order, trainer/pipeline_schedule.hpp executed by trainer/pipeline_run.hpp: stage s
// of P runs up to P − s − 1 forwards ahead of its backwards, so it holds at most min(P − s, m)
// micro-batches' layer inputs; the stage messages pass through the model's StageBoundary, each
// forward's output sent while a backward's gradient is received; the last stage's head scores the
// tokens in the logprob pass before; each stage updates its own tensors): each rank holds its shard of the
// weights (model/parallel/) and the AdamW moments of that shard (AdamW is elementwise, so the shards' updates
// are the whole model's); the ranks of a model-parallel group must be given the same batch share (the trainer
// tells the host its data-parallel replica, trainer.h out_data_parallel_rank). Under TP the embedding and LM
// head are split by token ids (model/parallel/vocab_parallel.hpp): each rank scores its vocabulary range and
// the log-softmax is assembled over the TP group, never the whole logits. The gradient-norm clip counts every
// element once (sharded tensors' squares summed over their groups, replicated ones taken once).
//
// moe_parallel_folding (false): the expert-parallel ranks train different parts of their replica's
// batch share (batch_part.hpp; the host gives the whole model-parallel group one share), the routed
// experts dispatched between them and every other tensor data-parallel over dp · ep ranks
// (trainer_group.hpp); a rank whose share has fewer micro-batches than its expert-parallel ranks'
// runs zero-gradient padding ones, and every training micro-batch runs its backward, so all of them
// take part in the same expert dispatches. compute_logprobs scores each rank's part the same way,
// the disjoint parts summed over the expert-parallel ranks.
// export_weights returns this rank's shards as ABI 1.2 sharded tensors (shard_boxes.hpp; boxes
// that continue each other joined, so a fused tensor a rank holds whole is one box).
//
// save_state and load_state are collective over the trainer group (trainer_state.hpp): the
// first data-parallel replica writes every tensor whole (the model directory HF and vLLM load, the
// fp32 master weights and moments), each rank its own files; a load reads this rank's slices, under
// any layout, and changes nothing unless every rank could read its part.
#pragma once

#include <string>
#include <vector>

#include "model/model.hpp"
#include "model/parallel/shard_export.hpp"
#include "trainer/adamw.hpp"
#include "trainer/grpo_loss.hpp"
#include "trainer/optimizer_shards.hpp"
#include "trainer/trainer_common.hpp"
#include "trainer/trainer_group.hpp"
#include "trainer/trainer_state.hpp"
#include "mlpt/sdk/trainer.hpp"

namespace mlpt::ref {

class ReferenceTrainer final : public sdk::Trainer {
 public:
  ReferenceTrainer(std::string_view config_json, const mlpt_component_group* group);

  void train_step(mlpt_train_step_args& args) override;
  void compute_logprobs(mlpt_compute_logprobs_args& args) override;
  void export_weights(mlpt_export_weights_args& args) override;
  void save_state(std::string_view path) override;
  void load_state(std::string_view path) override;
  // The ranks of one model-parallel group are one replica (trainer_group.hpp).
  DataParallel data_parallel() const override {
    return {group_.data_parallel_rank(), group_.data_parallel_size()};
  }

 private:
  // A row whose next token is scored: t is the token's index in the micro-batch (predicting t + 1),
  // row its row in the packed micro-batch.
  struct ScoredRow {
    int64_t t, row;
  };
  static std::vector<ScoredRow> scored_rows(const mlpt_train_batch& b, const MicroBatch& mb,
                                            const PackedMicroBatch& packed);
  ForwardBatch<float> forward_batch(PackedMicroBatch& packed) const;
  // The global L2 norm of the trainable gradients, each element of the whole model counted once.
  double global_grad_norm() const;

  TrainerGroup group_;
  std::string checkpoint_;
  ModelConfig config_, full_config_;  // this rank's shard's, and the whole model's
  Weights<float> weights_, m_, v_, grads_;  // m_, v_: this replica's ranges (optimizer_shards_)
  OptimizerShards optimizer_shards_;         // the distributed optimizer's split over the replicas
  std::vector<bool> trainable_;
  AdamWSettings optimizer_;
  LossSettings loss_;
  int threads_ = 1;
  bool share_prefixes_ = true;
  size_t save_piece_bytes_ = kSavePieceBytes;  // settings save_piece_bytes: see StateRanks::piece_bytes
  int64_t micro_batch_tokens_ = 8192, valid_vocab_ = 0;
  int64_t step_ = 0;
  uint64_t version_ = 0;

  std::vector<mlpt_metric> metrics_;
  std::vector<mlpt_named_tensor> exported_;
  std::vector<std::vector<int64_t>> exported_shapes_;
  ShardExport shard_export_;  // a model-parallel rank's export
};

}  // namespace mlpt::ref
