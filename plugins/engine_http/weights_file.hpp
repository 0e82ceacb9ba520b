// Weights handed to load_weights, written as one safetensors file (`dir`/model.safetensors) for
// the server to load through its update-from-disk endpoint. CPU tensors, compact, F32/BF16/F16.
// The file is written beside the old one and renamed over it, so a reader never sees half a file.
#pragma once

#include <cstddef>
#include <string>

#include "mlpt/mlpt.h"

namespace mlpt::engine_http {

// Returns the file's path. Throws sdk::Error naming the tensor that cannot be written, or the file.
std::string write_weights_file(const std::string& dir, const mlpt_named_tensor* tensors, size_t count);

}  // namespace mlpt::engine_http
