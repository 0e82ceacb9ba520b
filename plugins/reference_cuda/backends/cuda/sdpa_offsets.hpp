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

// Against the paged cache: query lengths and rows as above, key lengths from the cache's kv_lengths
// (int64 → int32), and the block table copied into a fixed table_width (>= max_blocks) so one plan
// serves tables of any width up to it (unused columns point at block 0, never read).
struct SdpaPagedInputs {
  int32_t *q_lengths, *kv_lengths;  // [num_seqs]
  int64_t *q_rows, *stats_rows;     // [num_seqs + 1]
  int32_t* table;                   // [num_seqs, table_width]
  static size_t bytes(int64_t num_seqs, int64_t table_width);
  static SdpaPagedInputs carve(void* base, int64_t num_seqs, int64_t table_width);
};

void sdpa_paged_inputs(const Context& ctx, const int64_t* q_offsets, const int64_t* kv_lengths,
                       const int32_t* block_table, int64_t max_blocks, int64_t num_seqs, int64_t table_width,
                       int64_t heads, int64_t head_dim, const SdpaPagedInputs& out);

void sdpa_sequence_inputs(const Context& ctx, const int64_t* q_offsets, const int64_t* kv_offsets,
                          int64_t num_seqs, int64_t heads, int64_t kv_heads, int64_t head_dim,
                          const SdpaSequenceInputs& out);

}  // namespace mlpt::ref::cuda
