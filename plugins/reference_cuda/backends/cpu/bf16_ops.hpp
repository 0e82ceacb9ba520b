// The ops interface on the CPU with bf16 storage emulated: the exact oracle of the CUDA backend's
// numerics. "Device" memory is host memory; every op widens its bf16 inputs to fp32, computes with
// this folder's kernels in fp32 (the CUDA kernels accumulate in fp32 too), and rounds each bf16
// output to nearest even, exactly where the CUDA op writes bf16, including inside an op (the routed
// experts' gate/up, SwiGLU and per-slot outputs, as backends/cuda/moe.cu keeps them). What then
// differs from the GPU is the order of fp32 sums (and fp32 exp/log ulps): the tests bound the GPU
// against this backend by that, and this backend against the fp32 model by bf16's own rounding.
//
// Synchronous; one thread at a time (the kernels inside may use OpenMP).
#pragma once

#include <mutex>
#include <unordered_map>

#include "ops/ops.hpp"

namespace mlpt::ref::cpu {

class Bf16Ops final : public Ops {
 public:
  const char* name() const override { return "cpu-bf16"; }

  void* allocate(size_t bytes) override;
  void release(void* p) noexcept override;
  // The bytes asked of allocate and not yet released: what a memory plan is checked against.
  size_t live_bytes() const;
  // The most live_bytes has been since the last reset_peak (or since construction): what a step's
  // activations and scratch add to the weights, measured against the memory plan.
  size_t peak_bytes() const;
  void reset_peak();
  void to_device(void* dst, const void* host, size_t bytes) override;
  void to_host(void* host, const void* src, size_t bytes) override;
  void copy(void* dst, const void* src, size_t bytes) override;
  void copy_rows(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t width,
                 int64_t rows) override;
  void zero(void* p, size_t bytes) override;
  void synchronize() override {}

  void to_bf16(int64_t n, const float* x, bf16* y) override;
  void to_float(int64_t n, const bf16* x, float* y) override;
  void add_inplace(int64_t n, const bf16* x, bf16* y) override;
  void add_inplace(int64_t n, const float* x, float* y) override;
  void to_bf16_marking(int64_t n, const float* x, bf16* y, uint32_t* changed) override;
  void copy_marking(int64_t n, const float* x, float* y, uint32_t* changed) override;

  void linear_forward(int64_t M, int64_t N, int64_t K, const bf16* x, const bf16* W, bf16* y,
                      bool accumulate = false) override;
  void linear_backward_input(int64_t M, int64_t N, int64_t K, const bf16* dy, const bf16* W, bf16* dx,
                             bool accumulate) override;
  void linear_backward_weight(int64_t M, int64_t N, int64_t K, const bf16* dy, const bf16* x,
                              float* dW) override;
  void logits_forward(int64_t rows, int64_t V, int64_t H, const bf16* hidden, const bf16* W,
                      float* logits) override;
  void embedding_forward(int64_t tokens, int64_t H, const int32_t* ids, const bf16* E, bf16* x) override;
  void embedding_backward(int64_t tokens, int64_t H, const int32_t* ids, const bf16* dx, float* dE) override;

  void rmsnorm_forward(int64_t rows, int64_t D, const bf16* x, const float* w, double eps, bf16* y) override;
  void rmsnorm_backward(int64_t rows, int64_t D, const bf16* x, const float* w, double eps, const bf16* dy,
                        bf16* dx, float* dw) override;
  void gated_rmsnorm_forward(int64_t rows, int64_t D, const bf16* o, const bf16* z, const float* w,
                             double eps, bf16* y) override;
  void gated_rmsnorm_backward(int64_t rows, int64_t D, const bf16* o, const bf16* z, const float* w,
                              double eps, const bf16* dy, bf16* d_o, bf16* dz, float* dw) override;
  void l2norm_forward(int64_t rows, int64_t heads, int64_t D, const bf16* x, int64_t x_stride, double eps,
                      double scale, float* y) override;
  void l2norm_backward(int64_t rows, int64_t heads, int64_t D, const bf16* x, int64_t x_stride, double eps,
                       double scale, const float* dy, bf16* dx, int64_t dx_stride) override;

  void gdn_gates_forward(int64_t rows, int64_t Hv, const bf16* a, const bf16* b, const float* a_log,
                         const float* dt_bias, float* g, float* beta) override;
  void gdn_gates_backward(int64_t rows, int64_t Hv, const bf16* a, const bf16* b, const float* a_log,
                          const float* dt_bias, const float* dg, const float* dbeta, bf16* da, bf16* db,
                          float* d_a_log, float* d_dt_bias) override;
  void sigmoid_gate_forward(int64_t rows, int64_t D, const bf16* o, int64_t o_stride, const bf16* gate,
                            int64_t gate_stride, bf16* y) override;
  void sigmoid_gate_backward(int64_t rows, int64_t D, const bf16* o, int64_t o_stride, const bf16* gate,
                             int64_t gate_stride, const bf16* dy, bf16* d_o, int64_t d_o_stride, bf16* dgate,
                             int64_t dgate_stride) override;
  void swiglu_forward(int64_t rows, int64_t I, const bf16* g, const bf16* u, int64_t gu_stride,
                      bf16* h) override;
  void swiglu_backward(int64_t rows, int64_t I, const bf16* g, const bf16* u, int64_t gu_stride,
                       const bf16* dh, bf16* dg, bf16* du, int64_t dgu_stride) override;
  void scaled_add_forward(int64_t rows, int64_t H, const bf16* logit, const bf16* s, bf16* y) override;
  void scaled_add_backward(int64_t rows, int64_t H, const bf16* logit, const bf16* s, const bf16* dy,
                           bf16* dlogit, bf16* ds) override;
  void rope_forward(int64_t rows, int64_t heads, int64_t D, int64_t rotary_dim, double theta,
                    const int64_t* positions, bf16* x) override;
  void rope_backward(int64_t rows, int64_t heads, int64_t D, int64_t rotary_dim, double theta,
                     const int64_t* positions, bf16* dx) override;

  void causal_conv_silu_forward(int64_t C, int64_t K, const int64_t* offsets, int64_t num_seqs,
                                int64_t num_tokens, const bf16* x, const float* w, bf16* const* caches,
                                bool update_caches, bf16* y) override;
  void causal_conv_silu_backward(int64_t C, int64_t K, const int64_t* offsets, int64_t num_seqs,
                                 int64_t num_tokens, const bf16* x, const float* w, const bf16* dy, bf16* dx,
                                 float* dw) override;
  void gdn_recurrent_forward(const GdnShape& shape, const int64_t* offsets, int64_t num_seqs, const float* q,
                             const float* k, const bf16* v, const float* g, const float* beta,
                             float* const* states, bf16* out) override;
  void gdn_chunked_forward(const GdnShape& shape, const int64_t* offsets, int64_t num_seqs, const float* q,
                           const float* k, const bf16* v, const float* g, const float* beta,
                           float* const* states, bf16* out) override;
  void gdn_backward(const GdnShape& shape, const int64_t* offsets, const int64_t* host_offsets,
                    int64_t num_seqs, const float* q, const float* k, const bf16* v, const float* g,
                    const float* beta, const bf16* d_out, float* d_q, float* d_k, bf16* d_v, float* d_g,
                    float* d_beta) override;
  void attention_forward(const AttentionShape& shape, const int64_t* q_offsets, const int64_t* kv_offsets,
                         int64_t num_seqs, int64_t num_q_tokens, const bf16* q, const bf16* k, const bf16* v,
                         bf16* out, float* lse) override;
  void attention_forward_paged(const AttentionShape& shape, const int64_t* q_offsets,
                               const int64_t* kv_lengths, int64_t num_seqs, int64_t num_q_tokens,
                               const bf16* q, const bf16* k_pool, const bf16* v_pool,
                               const int32_t* block_table, int64_t max_blocks, int64_t block_size,
                               bf16* out) override;
  void paged_kv_write(const AttentionShape& shape, const int64_t* q_offsets, const int64_t* kv_lengths,
                      int64_t num_seqs, int64_t num_q_tokens, const bf16* k, const bf16* v, bf16* k_pool,
                      bf16* v_pool, const int32_t* block_table, int64_t max_blocks,
                      int64_t block_size) override;
  void attention_backward(const AttentionShape& shape, const int64_t* q_offsets, const int64_t* kv_offsets,
                          int64_t num_seqs, int64_t num_q_tokens, int64_t num_kv_tokens, const bf16* q,
                          const bf16* k, const bf16* v, const bf16* out, const float* lse, const bf16* d_out,
                          bf16* d_q, bf16* d_k, bf16* d_v) override;

  void route(const MoeShape& shape, int64_t rows, const float* logits, const int16_t* replay,
             int16_t* experts, float* weights, int* bad_replays) override;
  void route_backward(const MoeShape& shape, int64_t rows, const float* logits, const int16_t* experts,
                      const float* weights, const float* dweights, float* dlogits) override;
  void experts_forward(const MoeShape& shape, int64_t rows, const bf16* x, const int16_t* experts,
                       const float* weights, const bf16* gate_up, const bf16* down, bf16* y) override;
  void experts_backward(const MoeShape& shape, int64_t rows, const bf16* x, const int16_t* experts,
                        const float* weights, const bf16* gate_up, const bf16* down, const bf16* dy, bf16* dx,
                        bool accumulate_dx, float* dweights, float* dgate_up, float* ddown) override;

  void token_logprobs(int64_t rows, int64_t V, int64_t valid, const float* logits, const int32_t* targets,
                      float* logprob, float* lse) override;
  void token_logprobs_backward(int64_t rows, int64_t V, int64_t valid, const float* logits, const float* lse,
                               const int32_t* targets, const float* coef, bf16* dlogits) override;
  void vocab_logprob_stats(int64_t rows, int64_t V, int64_t valid, const float* logits, const int32_t* targets,
                           float* stats) override;
  void vocab_logprob_combine(int64_t rows, int64_t parts, const float* stats, float* logprob, float* lse) override;
  void grpo_token_loss(int64_t n, const float* pw, const float* logp_theta, const float* logp_prev,
                       bool ppo_clip, double clip_low, double clip_high, float* loss, float* coef) override;
  void sum_squares(int64_t n, const float* g, double* sum_sq) override;
  void sample_tokens(int64_t rows, int64_t V, int64_t valid, const float* logits, const SamplingRow* params,
                     int32_t* tokens, float* logprob) override;
  void adamw_update(int64_t n, const AdamWStep& s, const float* grad, float* master, float* m, float* v,
                    bf16* working) override;
 private:
  mutable std::mutex allocations_mutex_;
  std::unordered_map<void*, size_t> allocations_;  // pointer -> bytes asked
  size_t live_bytes_ = 0;
  size_t peak_bytes_ = 0;
};

}  // namespace mlpt::ref::cpu
