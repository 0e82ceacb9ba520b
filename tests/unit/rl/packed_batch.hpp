// A packed train batch (mlpt_train_batch) for tests of how the batch is shared among trainer
// ranks: sequence s has lengths[s] tokens (100 * s + i), the first `prompt` of them not trained;
// advantage s; sequence 1 truncated.
#pragma once

#include <cstdint>
#include <vector>

#include "mlpt/trainer.h"

namespace mlpt_test {

struct PackedBatch {
  std::vector<int64_t> offsets{0};
  std::vector<int32_t> tokens;
  std::vector<uint8_t> loss_mask, truncated;
  std::vector<float> logprobs, advantages;
  mlpt_train_batch abi{};
  PackedBatch(const std::vector<int>& lengths, int prompt) {
    for (size_t s = 0; s < lengths.size(); ++s) {
      for (int i = 0; i < lengths[s]; ++i) {
        tokens.push_back(static_cast<int32_t>(100 * s + i));
        loss_mask.push_back(i >= prompt);
        logprobs.push_back(i >= prompt ? -0.5f : 0.0f);
      }
      offsets.push_back(static_cast<int64_t>(tokens.size()));
      advantages.push_back(static_cast<float>(s));
      truncated.push_back(s == 1);
    }
    abi.struct_size = MLPT_TRAIN_BATCH_STRUCT_SIZE;
    abi.num_sequences = lengths.size();
    abi.offsets = offsets.data(), abi.tokens = tokens.data(), abi.loss_mask = loss_mask.data();
    abi.generation_logprobs = logprobs.data(), abi.advantages = advantages.data(), abi.truncated = truncated.data();
  }
  PackedBatch(const PackedBatch&) = delete;  // abi points into the vectors
  PackedBatch& operator=(const PackedBatch&) = delete;
};

}  // namespace mlpt_test
