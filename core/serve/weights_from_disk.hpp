// Weights for /update_weights_from_disk: one .safetensors file (or a folder holding
// model.safetensors), every header entry checked against the file before a byte is trusted, held
// in memory as named DLPack tensors for the engine's load_weights.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "mlpt/mlpt.h"

namespace mlpt::serve {

class WeightsFromDisk {
 public:
  // Throws mlpt::Error naming the file and what is wrong with it (unreadable, a bad header, a dtype
  // other than F32/BF16/F16, a range outside the data or not matching dtype x shape).
  explicit WeightsFromDisk(const std::string& path);
  WeightsFromDisk(const WeightsFromDisk&) = delete;
  WeightsFromDisk& operator=(const WeightsFromDisk&) = delete;

  const std::string& file() const { return file_; }
  // Valid while this object lives.
  const std::vector<mlpt_named_tensor>& tensors() const { return tensors_; }

 private:
  std::string file_;
  std::string bytes_;           // the whole file, while reading
  std::vector<uint64_t> data_;  // the data section
  std::vector<std::string> names_;
  std::vector<std::vector<int64_t>> shapes_;
  std::vector<mlpt_named_tensor> tensors_;
};

}  // namespace mlpt::serve
