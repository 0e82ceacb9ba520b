// What the qwen35 trainers share whatever their backend (trainer.hpp documents the step and the
// settings): settings parsing, batch checks, the micro-batch split, and the state directory
// (checkpoint + optimizer moments + trainer_state.json), so the CPU and CUDA trainers read the
// same configuration and save interchangeable states.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "model/weights.hpp"
#include "trainer/adamw.hpp"
#include "trainer/grpo_loss.hpp"
#include "trainer/shared_prefix.hpp"
#include "mlpt/sdk/settings.hpp"
#include "mlpt/trainer.h"

namespace mlpt::ref {

using sdk::Settings;

struct TrainerSettings {
  std::string checkpoint;
  int64_t threads = 1, micro_batch_tokens = 8192, sampling_vocab_size = 0;
  AdamWSettings optimizer;
  LossSettings loss;
  bool freeze_router = true;
};

// Parses the trainer settings of trainer.hpp; `component` names it in errors ("trainer
// qwen35_cpu"); `extra` reads backend-specific top-level keys before unknown keys are rejected.
TrainerSettings parse_trainer_settings(std::string_view json, const std::string& component,
                                       const std::function<void(Settings&)>& extra = {});

// Throws MLPT_INVALID_ARGUMENT when a training batch lacks its loss inputs, routing records do not
// match the model, or an advantage is not finite.
void check_train_batch(const mlpt_train_batch& b, const ModelConfig& config, bool training);

// Whole sequences, at most max_tokens computed tokens per micro-batch unless one sequence is longer
// (with `groups`, a shared prefix counts once, and sequences sharing an overlong first sequence's
// prefix still join while their own tokens fit); in a train step a micro-batch never mixes
// sequences that can change the weights (nonzero advantage, not truncated, a trainable token)
// with ones that cannot, so the latter skip the backward.
struct MicroBatch {
  size_t first_seq, end_seq;
  int64_t first_token, end_token;
  bool trains;  // holds sequences that can change the weights (then all of them do)
};
bool sequence_trains(const mlpt_train_batch& b, size_t sequence);
std::vector<MicroBatch> split_micro_batches(const mlpt_train_batch& b, int64_t max_tokens, bool training,
                                            const PrefixGroups* groups = nullptr);

// The trainable mask: every tensor, but the routers when frozen.
std::vector<bool> trainable_tensors(const ModelLayout& layout, bool freeze_router);

// The step's metrics, as the trainers report them (names stay valid: they are literals).
struct StepWork {
  size_t micro_batches = 0;
  int64_t forward_tokens = 0, backward_tokens = 0, head_rows = 0;
  int64_t shared_prefix_tokens = 0;  // tokens not computed because a shared prefix was computed once
};
std::vector<mlpt_metric> step_metrics(double loss, double grad_norm, double clip_scale, const LossPlan& plan,
                                      const StepWork& work, double lr, int64_t step);

}  // namespace mlpt::ref
