// What a fused-attention library (cuDNN's, backends/cuda/cudnn_attention.hpp) is asked for, decided
// on the host: the shape an execution plan is built and kept for, the ragged layout of a packed
// batch, and the scratch the backward graph needs beside the library's own workspace. Host logic
// only, tested on any machine; the GPU checks the device side against it.
//
// A packed batch is [tokens, heads, head_dim] with per-sequence token offsets (ops/ops.hpp). The
// library sees it as [batch, heads, max_len, head_dim] with a ragged offset per sequence (where its
// rows start, in elements) and its true lengths; rows past a sequence's length are masked. The
// longest sequence is not known on the host without a copy back (the offsets live on the device),
// so max_len is the batch's token count rounded up to a power of two: never shorter than any
// sequence, and few distinct plans as micro-batches vary.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

namespace mlpt::ref {

// forward / backward over a packed batch; paged_forward: the queries against the engine's paged KV
// cache (decode and prefill with per-sequence state).
enum class SdpaPass { forward, backward, paged_forward };

struct SdpaShapeKey {
  SdpaPass pass = SdpaPass::forward;
  int64_t batch = 0;              // sequences
  int64_t max_q = 0, max_kv = 0;  // length buckets (sdpa_length_bucket)
  int64_t heads = 0, kv_heads = 0, head_dim = 0;
  // Paged only: tokens per block, block-table columns (a power of two, max_kv = table × block),
  // and the blocks the pool is described with (the most the device's memory can hold: the pool's
  // own size is not passed to the op, and pages are only read where the table points).
  int64_t block_size = 0, table_width = 0, pool_blocks = 0;
  bool operator==(const SdpaShapeKey&) const = default;
};

struct SdpaShapeKeyHash {
  size_t operator()(const SdpaShapeKey& k) const {
    size_t h = std::hash<int64_t>{}(k.batch);
    for (int64_t v : {k.max_q, k.max_kv, k.heads, k.kv_heads, k.head_dim, k.block_size, k.table_width})
      h = h * 1000003u ^ std::hash<int64_t>{}(v);
    return h * 3u + size_t(k.pass);
  }
};

// The smallest power of two >= tokens, at least 64 (the libraries' tile); tokens >= 1.
int64_t sdpa_length_bucket(int64_t tokens);

// The key of one call; throws MLPT_INVALID_ARGUMENT naming `what` when a count is not positive,
// the heads do not group (heads % kv_heads) or head_dim is not a multiple of 8 (16-byte rows).
SdpaShapeKey sdpa_shape_key(SdpaPass pass, int64_t heads, int64_t kv_heads, int64_t head_dim,
                            int64_t num_seqs, int64_t q_tokens, int64_t kv_tokens, const char* what);

// The key of attention against a paged cache: q_tokens new tokens of num_seqs sequences, a block
// table of max_blocks columns of block_size tokens, a device of device_bytes memory.
SdpaShapeKey sdpa_paged_key(int64_t heads, int64_t kv_heads, int64_t head_dim, int64_t num_seqs,
                            int64_t q_tokens, int64_t max_blocks, int64_t block_size, size_t device_bytes,
                            const char* what);

// "forward: 2 sequences, q <= 4096, kv <= 4096 tokens, 16/2 heads, head_dim 256": for errors.
std::string describe(const SdpaShapeKey& key);

// The backward graph's fp32 scratch, in bytes at 256-byte aligned offsets: dO·O per query row,
// the d_q accumulator, and (grouped heads only) d_k and d_v per query head before their sum over
// the group. Packed like the batch: sized by tokens rounded up to whole tiles of 128, not by the
// bucket.
struct SdpaBackwardScratch {
  size_t row_sums = 0, dq_accum = 0, dk_per_head = 0, dv_per_head = 0, total = 0;
};
SdpaBackwardScratch sdpa_backward_scratch(const SdpaShapeKey& key, int64_t q_tokens, int64_t kv_tokens);

// The library's per-sequence inputs from token offsets [num_seqs + 1] (host reference of the device
// kernel, backends/cuda/sdpa_offsets.hpp): lengths (int32) and row starts in elements of a row of
// `row_elems` values (int64, num_seqs + 1 entries).
void sdpa_lengths(const int64_t* offsets, int64_t num_seqs, int32_t* lengths);
void sdpa_ragged_offsets(const int64_t* offsets, int64_t num_seqs, int64_t row_elems, int64_t* ragged);

}  // namespace mlpt::ref
