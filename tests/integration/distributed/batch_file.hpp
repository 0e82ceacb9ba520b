// A training batch read from the JSON file the distributed tests write (batch.json: offsets,
// tokens, loss_mask, truncated, generation_logprobs, advantages), as an mlpt_train_batch that
// points into this object.
#pragma once

#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "mlpt/trainer.h"

namespace dist_test {

struct BatchFile {
  std::vector<int64_t> offsets;
  std::vector<int32_t> tokens;
  std::vector<uint8_t> loss_mask, truncated;
  std::vector<float> logprobs, advantages;
  mlpt_train_batch abi{};

  explicit BatchFile(const std::string& path) {
    const nlohmann::json b = nlohmann::json::parse(std::ifstream(path));
    offsets = b["offsets"].get<std::vector<int64_t>>();
    tokens = b["tokens"].get<std::vector<int32_t>>();
    loss_mask = b["loss_mask"].get<std::vector<uint8_t>>(), truncated = b["truncated"].get<std::vector<uint8_t>>();
    logprobs = b["generation_logprobs"].get<std::vector<float>>(), advantages = b["advantages"].get<std::vector<float>>();
    abi.struct_size = MLPT_TRAIN_BATCH_STRUCT_SIZE;
    abi.num_sequences = advantages.size();
    abi.offsets = offsets.data(), abi.tokens = tokens.data(), abi.loss_mask = loss_mask.data();
    abi.generation_logprobs = logprobs.data(), abi.advantages = advantages.data(), abi.truncated = truncated.data();
  }
  BatchFile(const BatchFile&) = delete;  // abi points into this object
  BatchFile& operator=(const BatchFile&) = delete;
};

}  // namespace dist_test
