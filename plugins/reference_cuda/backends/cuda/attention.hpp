// Causal multi-head attention with grouped KV heads (docs/qwen35-architecture.md §2.5), after the q/k
// norms and RoPE and before the output gate: the CUDA counterpart of ../cpu/attention.hpp, with the
// same packed-sequence contract (queries are the LAST q_len tokens of their sequence; query i sees
// kv positions 0 .. kv_len − q_len + i). Flash-style: keys stream through shared memory in tiles
// with an online softmax in fp32; no score matrix is ever formed. Head dim up to 256.
//   q [Tq, H, D], k and v [Tkv, Hkv, D], out [Tq, H, D], all bf16; offsets on the device;
//   lse [Tq, H] fp32 (log-sum-exp of each softmax row, kept for the backward; may be NULL).
#pragma once

#include "backends/cpu/attention.hpp"
#include "backends/cuda/context.hpp"

namespace mlpt::ref::cuda {

using AttentionShape = cpu::AttentionShape;  // the CPU backend's shape (H, Hkv, D), here D <= 256

void attention_forward(const Context& ctx, const AttentionShape& shape, const int64_t* q_offsets,
                       const int64_t* kv_offsets, int64_t num_seqs, int64_t num_q_tokens, const bf16* q, const bf16* k,
                       const bf16* v, bf16* out, float* lse);

// The engine's paged KV cache: sequence s's kv position p lives in pool block
// block_table[s * max_blocks + p / block_size], slot p % block_size; pools are
// [num_blocks, block_size, Hkv, D]. kv_lengths [num_seqs] (device) is each sequence's kv length
// including its q_len new tokens, which must already be written (paged_kv_write).
void attention_forward_paged(const Context& ctx, const AttentionShape& shape, const int64_t* q_offsets,
                             const int64_t* kv_lengths, int64_t num_seqs, int64_t num_q_tokens, const bf16* q,
                             const bf16* k_pool, const bf16* v_pool, const int32_t* block_table, int64_t max_blocks,
                             int64_t block_size, bf16* out);

// Writes the new tokens' keys and values ([Tq, Hkv, D], packed by q_offsets) into the pools at
// positions kv_lengths[s] − q_len .. kv_lengths[s] − 1.
void paged_kv_write(const Context& ctx, const AttentionShape& shape, const int64_t* q_offsets,
                    const int64_t* kv_lengths, int64_t num_seqs, int64_t num_q_tokens, const bf16* k, const bf16* v,
                    bf16* k_pool, bf16* v_pool, const int32_t* block_table, int64_t max_blocks, int64_t block_size);

// Gradients of sum(d_out * out) w.r.t. q, k, v (bf16, overwritten), from the forward's out and lse
// (softmax rows are recomputed, as flash attention's backward does). `scratch` grows as needed
// (fp32 accumulators for d_k, d_v and the row terms dO·O).
void attention_backward(const Context& ctx, const AttentionShape& shape, const int64_t* q_offsets,
                        const int64_t* kv_offsets, int64_t num_seqs, int64_t num_q_tokens, int64_t num_kv_tokens,
                        const bf16* q, const bf16* k, const bf16* v, const bf16* out, const float* lse,
                        const bf16* d_out, bf16* d_q, bf16* d_k, bf16* d_v, DeviceBuffer& scratch);

}  // namespace mlpt::ref::cuda
