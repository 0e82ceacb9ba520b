// Weights crossing the ABI as named DLPack tensors (HF names, §5): export from a Weights object and
// import with full checking (every tensor present once, right shape, CPU, compact, F32/BF16/F16).
#pragma once

#include <string>
#include <vector>

#include "model/weights.hpp"
#include "mlpt/mlpt.h"

namespace mlpt::ref {

// Views of `weights` (fp32, CPU) named as in the checkpoint; valid while `weights` and `shapes`
// live and are not resized.
std::vector<mlpt_named_tensor> export_named_tensors(Weights<float>& weights, std::vector<std::vector<int64_t>>& shapes);

// The same views over fp32 tensors anywhere (one data pointer per layout tensor, on `device`).
std::vector<mlpt_named_tensor> named_tensor_views(const ModelLayout& layout, const std::vector<void*>& data,
                                                  DLDevice device, std::vector<std::vector<int64_t>>& shapes);

// The layout index of every given tensor, after checking them all: each tensor of the layout
// present once, right shape, compact, F32/BF16/F16, in CPU memory (or CUDA memory when
// `device_memory_ok`). Throws MLPT_INVALID_ARGUMENT naming the first bad tensor.
std::vector<int> match_named_tensors(const ModelLayout& layout, const mlpt_named_tensor* tensors, size_t count,
                                     bool device_memory_ok);
// Throws MLPT_INVALID_ARGUMENT naming `what` unless the tensor is compact row-major F32/BF16/F16 in
// CPU memory (or CUDA memory when `device_memory_ok`).
void check_tensor_memory(const std::string& what, const DLTensor& tensor, bool device_memory_ok);
// A checked tensor in CPU memory as fp32 (numel values into `out`).
void host_tensor_to_float(const DLTensor& tensor, float* out);

// Copies (converting) the tensors into a new Weights of `config`. Throws MLPT_INVALID_ARGUMENT naming
// the first missing, extra, duplicated or misshapen tensor; the caller's weights are untouched.
Weights<float> import_named_tensors(const ModelConfig& config, const mlpt_named_tensor* tensors, size_t count);

}  // namespace mlpt::ref
