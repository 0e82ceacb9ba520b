// The softmax(QK^T/sqrt(d))V core of gated attention by cuDNN's fused attention (flash attention
// with tensor cores), built through its graph API: causal with the diagonal at the bottom right
// (the queries are the last tokens of their sequence, as attention.hpp's contract says), grouped
// KV heads, packed sequences of different lengths as ragged tensors with their true lengths, and
// the engine's paged KV cache through cuDNN's paged cache load (decode, prefill with state). The
// forward writes the same softmax statistics (natural-log sum of exp per query row and head) that
// this backend's kernels write, so either backward runs after either forward.
//
// One execution plan per shape (device_model/sdpa_plan.hpp: sequences, power-of-two length
// buckets, heads, head_dim), built on first use and kept (least recently used forgotten beyond
// kMaxPlans). The per-sequence lengths and row offsets are made on the device from the batch's
// offsets (sdpa_offsets.hpp): no host round trip. Chosen by cuda_attention = "cudnn"
// (device_model/backend_options.hpp); a build or a machine without cuDNN refuses it, naming why.
#pragma once

#include <memory>
#include <vector>

#include "backends/cuda/attention.hpp"
#include "device_model/sdpa_plan.hpp"

namespace mlpt::ref::cuda {

class CudnnAttention {
 public:
  static constexpr size_t kMaxPlans = 64;

  // Loads cuDNN and makes its handle on `stream`; throws MLPT_FAILED_PRECONDITION when this build
  // or this machine has no cuDNN 9.
  explicit CudnnAttention(cudaStream_t stream);
  ~CudnnAttention();
  CudnnAttention(const CudnnAttention&) = delete;
  CudnnAttention& operator=(const CudnnAttention&) = delete;

  // attention_forward's contract (lse may be NULL). Returns false, running nothing, when the keys
  // are not the queries' own tokens (kv_offsets != q_offsets): their count is then not known on the
  // host, and the caller runs the kernel (counted in kernel_fallbacks()).
  bool forward(const AttentionShape& shape, const int64_t* q_offsets, const int64_t* kv_offsets,
               int64_t num_seqs, int64_t num_q_tokens, const bf16* q, const bf16* k, const bf16* v, bf16* out,
               float* lse);
  // attention_forward_paged's contract (the queries against the paged pools; the new tokens' keys
  // and values already written). The block table is copied to a power-of-two width and the pools
  // are described as holding as many blocks as the device's memory could, so one plan serves a
  // growing table and any pool (pages are read only where the table points).
  void forward_paged(const AttentionShape& shape, const int64_t* q_offsets, const int64_t* kv_lengths,
                     int64_t num_seqs, int64_t num_q_tokens, const bf16* q, const bf16* k_pool,
                     const bf16* v_pool, const int32_t* block_table, int64_t max_blocks, int64_t block_size,
                     bf16* out);
  // attention_backward's contract: d_q, d_k, d_v overwritten.
  void backward(const AttentionShape& shape, const int64_t* q_offsets, const int64_t* kv_offsets,
                int64_t num_seqs, int64_t num_q_tokens, int64_t num_kv_tokens, const bf16* q, const bf16* k,
                const bf16* v, const bf16* out, const float* lse, const bf16* d_out, bf16* d_q, bf16* d_k,
                bf16* d_v);

  size_t plans_built() const;   // execution plans made (each a heuristics query and compilation)
  size_t plans_reused() const;  // calls that found their plan cached
  size_t kernel_fallbacks() const { return fallbacks_; }
  // The device buffers recorded work reads (workspace, per-sequence inputs, spare statistics): a
  // recording stays valid while these stay put (backends/cuda/recorder.hpp).
  std::vector<const void*> scratch_addresses() const;
  size_t library_version() const;  // cudnnGetVersion(), e.g. 91900

  // Builds `key`'s operation graph without a plan: every tensor and operation, and the graph,
  // finalized by cuDNN (shapes and types checked), with no GPU needed. Throws naming the failing
  // step; MLPT_FAILED_PRECONDITION when cuDNN cannot be loaded.
  static void validate_graphs(const SdpaShapeKey& key);

 private:
  struct State;
  std::unique_ptr<State> state_;
  size_t fallbacks_ = 0;
};

}  // namespace mlpt::ref::cuda
