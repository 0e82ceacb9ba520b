// The per-sequence inputs cuDNN's fused attention reads (cudnn_attention.hpp), made on the device
// from a packed batch's token offsets so no host round trip is needed: each sequence's query and
// key lengths (int32) and where its rows start in Q/O, K/V and the softmax statistics (int64,
// elements, num_seqs + 1 entries each). Host reference: device_model/sdpa_plan.hpp.
#pragma once

#include "backends/cuda/context.hpp"

namespace mlpt::ref::cuda {

struct SdpaSequenceInputs {
  int32_t *q_lengths, *kv_lengths;         // [num_seqs]
  int64_t *q_rows, *kv_rows, *stats_rows;  // [num_seqs + 1]: offsets × H·D, × Hkv·D, × H
  // Bytes for num_seqs sequences, each array 256-byte aligned; carve() lays them out in `base`.
  static size_t bytes(int64_t num_seqs);
  static SdpaSequenceInputs carve(void* base, int64_t num_seqs);
};

void sdpa_sequence_inputs(const Context& ctx, const int64_t* q_offsets, const int64_t* kv_offsets,
                          int64_t num_seqs, int64_t heads, int64_t kv_heads, int64_t head_dim,
                          const SdpaSequenceInputs& out);

}  // namespace mlpt::ref::cuda
