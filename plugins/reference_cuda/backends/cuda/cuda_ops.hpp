// The ops interface (ops/ops.hpp) on one CUDA stream: each op is this folder's kernel or cuBLAS
// call, queued on ctx.stream. The device model (device_model/) runs on it; the components
// (components/) own one per GPU context.
#pragma once

#include "backends/cuda/context.hpp"
#include "backends/cuda/recorder.hpp"
#include "ops/ops.hpp"

namespace mlpt::ref::cuda {

// ops/bf16.hpp's bf16 and CUDA's __nv_bfloat16 are the same two bytes.
static_assert(sizeof(ref::bf16) == sizeof(bf16), "bf16 layouts agree");
inline bf16* as_cuda(ref::bf16* p) {
  return reinterpret_cast<bf16*>(p);
}
inline const bf16* as_cuda(const ref::bf16* p) {
  return reinterpret_cast<const bf16*>(p);
}
inline ref::bf16* as_ref(bf16* p) {
  return reinterpret_cast<ref::bf16*>(p);
}
inline const ref::bf16* as_ref(const bf16* p) {
  return reinterpret_cast<const ref::bf16*>(p);
}

class CudaOps final : public Ops {
 public:
  explicit CudaOps(const Context& ctx)
      : ctx_(ctx), recorder_(ctx_, {&moe_scratch_, &gdn_scratch_, &attn_scratch_}) {}
  const char* name() const override { return "cuda"; }
  const Context& context() const { return ctx_; }

  void* allocate(size_t bytes) override;
  void release(void* p) noexcept override;
  void to_device(void* dst, const void* host, size_t bytes) override;
  void to_host(void* host, const void* src, size_t bytes) override;
  void copy(void* dst, const void* src, size_t bytes) override;
  void copy_rows(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t width,
                 int64_t rows) override;
  void zero(void* p, size_t bytes) override;
  void synchronize() override;

  void to_bf16(int64_t n, const float* x, ref::bf16* y) override;
  void to_float(int64_t n, const ref::bf16* x, float* y) override;
  void add_inplace(int64_t n, const ref::bf16* x, ref::bf16* y) override;
  void add_inplace(int64_t n, const float* x, float* y) override;
  void to_bf16_marking(int64_t n, const float* x, ref::bf16* y, uint32_t* changed) override;
  void copy_marking(int64_t n, const float* x, float* y, uint32_t* changed) override;

  void linear_forward(int64_t M, int64_t N, int64_t K, const ref::bf16* x, const ref::bf16* W, ref::bf16* y,
                      bool accumulate = false) override;
  void linear_backward_input(int64_t M, int64_t N, int64_t K, const ref::bf16* dy, const ref::bf16* W,
                             ref::bf16* dx, bool accumulate) override;
  void linear_backward_weight(int64_t M, int64_t N, int64_t K, const ref::bf16* dy, const ref::bf16* x,
                              float* dW) override;
  void logits_forward(int64_t rows, int64_t V, int64_t H, const ref::bf16* hidden, const ref::bf16* W,
                      float* logits) override;
  void embedding_forward(int64_t tokens, int64_t H, const int32_t* ids, const ref::bf16* E,
                         ref::bf16* x) override;
  void embedding_backward(int64_t tokens, int64_t H, const int32_t* ids, const ref::bf16* dx,
                          float* dE) override;

  void rmsnorm_forward(int64_t rows, int64_t D, const ref::bf16* x, const float* w, double eps,
                       ref::bf16* y) override;
  void rmsnorm_backward(int64_t rows, int64_t D, const ref::bf16* x, const float* w, double eps,
                        const ref::bf16* dy, ref::bf16* dx, float* dw) override;
  void gated_rmsnorm_forward(int64_t rows, int64_t D, const ref::bf16* o, const ref::bf16* z, const float* w,
                             double eps, ref::bf16* y) override;
  void gated_rmsnorm_backward(int64_t rows, int64_t D, const ref::bf16* o, const ref::bf16* z, const float* w,
                              double eps, const ref::bf16* dy, ref::bf16* d_o, ref::bf16* dz,
                              float* dw) override;
  void l2norm_forward(int64_t rows, int64_t heads, int64_t D, const ref::bf16* x, int64_t x_stride,
                      double eps, double scale, float* y) override;
  void l2norm_backward(int64_t rows, int64_t heads, int64_t D, const ref::bf16* x, int64_t x_stride,
                       double eps, double scale, const float* dy, ref::bf16* dx, int64_t dx_stride) override;

  void gdn_gates_forward(int64_t rows, int64_t Hv, const ref::bf16* a, const ref::bf16* b, const float* a_log,
                         const float* dt_bias, float* g, float* beta) override;
  void gdn_gates_backward(int64_t rows, int64_t Hv, const ref::bf16* a, const ref::bf16* b,
                          const float* a_log, const float* dt_bias, const float* dg, const float* dbeta,
                          ref::bf16* da, ref::bf16* db, float* d_a_log, float* d_dt_bias) override;
  void sigmoid_gate_forward(int64_t rows, int64_t D, const ref::bf16* o, int64_t o_stride,
                            const ref::bf16* gate, int64_t gate_stride, ref::bf16* y) override;
  void sigmoid_gate_backward(int64_t rows, int64_t D, const ref::bf16* o, int64_t o_stride,
                             const ref::bf16* gate, int64_t gate_stride, const ref::bf16* dy, ref::bf16* d_o,
                             int64_t d_o_stride, ref::bf16* dgate, int64_t dgate_stride) override;
  void swiglu_forward(int64_t rows, int64_t I, const ref::bf16* g, const ref::bf16* u, int64_t gu_stride,
                      ref::bf16* h) override;
  void swiglu_backward(int64_t rows, int64_t I, const ref::bf16* g, const ref::bf16* u, int64_t gu_stride,
                       const ref::bf16* dh, ref::bf16* dg, ref::bf16* du, int64_t dgu_stride) override;
  void scaled_add_forward(int64_t rows, int64_t H, const ref::bf16* logit, const ref::bf16* s,
                          ref::bf16* y) override;
  void scaled_add_backward(int64_t rows, int64_t H, const ref::bf16* logit, const ref::bf16* s,
                           const ref::bf16* dy, ref::bf16* dlogit, ref::bf16* ds) override;
  void rope_forward(int64_t rows, int64_t heads, int64_t D, int64_t rotary_dim, double theta,
                    const int64_t* positions, ref::bf16* x) override;
  void rope_backward(int64_t rows, int64_t heads, int64_t D, int64_t rotary_dim, double theta,
                     const int64_t* positions, ref::bf16* dx) override;

  void causal_conv_silu_forward(int64_t C, int64_t K, const int64_t* offsets, int64_t num_seqs,
                                int64_t num_tokens, const ref::bf16* x, const float* w,
                                ref::bf16* const* caches, bool update_caches, ref::bf16* y) override;
  void causal_conv_silu_backward(int64_t C, int64_t K, const int64_t* offsets, int64_t num_seqs,
                                 int64_t num_tokens, const ref::bf16* x, const float* w, const ref::bf16* dy,
                                 ref::bf16* dx, float* dw) override;
  void gdn_recurrent_forward(const GdnShape& shape, const int64_t* offsets, int64_t num_seqs, const float* q,
                             const float* k, const ref::bf16* v, const float* g, const float* beta,
                             float* const* states, ref::bf16* out) override;
  void gdn_chunked_forward(const GdnShape& shape, const int64_t* offsets, int64_t num_seqs, const float* q,
                           const float* k, const ref::bf16* v, const float* g, const float* beta,
                           float* const* states, ref::bf16* out) override;
  void gdn_backward(const GdnShape& shape, const int64_t* offsets, const int64_t* host_offsets,
                    int64_t num_seqs, const float* q, const float* k, const ref::bf16* v, const float* g,
                    const float* beta, const ref::bf16* d_out, float* d_q, float* d_k, ref::bf16* d_v,
                    float* d_g, float* d_beta) override;
  void attention_forward(const AttentionShape& shape, const int64_t* q_offsets, const int64_t* kv_offsets,
                         int64_t num_seqs, int64_t num_q_tokens, const ref::bf16* q, const ref::bf16* k,
                         const ref::bf16* v, ref::bf16* out, float* lse) override;
  void attention_forward_paged(const AttentionShape& shape, const int64_t* q_offsets,
                               const int64_t* kv_lengths, int64_t num_seqs, int64_t num_q_tokens,
                               const ref::bf16* q, const ref::bf16* k_pool, const ref::bf16* v_pool,
                               const int32_t* block_table, int64_t max_blocks, int64_t block_size,
                               ref::bf16* out) override;
  void paged_kv_write(const AttentionShape& shape, const int64_t* q_offsets, const int64_t* kv_lengths,
                      int64_t num_seqs, int64_t num_q_tokens, const ref::bf16* k, const ref::bf16* v,
                      ref::bf16* k_pool, ref::bf16* v_pool, const int32_t* block_table, int64_t max_blocks,
                      int64_t block_size) override;
  void attention_backward(const AttentionShape& shape, const int64_t* q_offsets, const int64_t* kv_offsets,
                          int64_t num_seqs, int64_t num_q_tokens, int64_t num_kv_tokens, const ref::bf16* q,
                          const ref::bf16* k, const ref::bf16* v, const ref::bf16* out, const float* lse,
                          const ref::bf16* d_out, ref::bf16* d_q, ref::bf16* d_k, ref::bf16* d_v) override;

  void route(const MoeShape& shape, int64_t rows, const float* logits, const int16_t* replay,
             int16_t* experts, float* weights, int* bad_replays) override;
  void route_backward(const MoeShape& shape, int64_t rows, const float* logits, const int16_t* experts,
                      const float* weights, const float* dweights, float* dlogits) override;
  void experts_forward(const MoeShape& shape, int64_t rows, const ref::bf16* x, const int16_t* experts,
                       const float* weights, const ref::bf16* gate_up, const ref::bf16* down,
                       ref::bf16* y) override;
  void experts_backward(const MoeShape& shape, int64_t rows, const ref::bf16* x, const int16_t* experts,
                        const float* weights, const ref::bf16* gate_up, const ref::bf16* down,
                        const ref::bf16* dy, ref::bf16* dx, bool accumulate_dx, float* dweights,
                        float* dgate_up, float* ddown) override;

  void token_logprobs(int64_t rows, int64_t V, int64_t valid, const float* logits, const int32_t* targets,
                      float* logprob, float* lse) override;
  void token_logprobs_backward(int64_t rows, int64_t V, int64_t valid, const float* logits, const float* lse,
                               const int32_t* targets, const float* coef, ref::bf16* dlogits) override;
  void vocab_logprob_stats(int64_t rows, int64_t V, int64_t valid, const float* logits, const int32_t* targets,
                           float* stats) override;
  void vocab_logprob_combine(int64_t rows, int64_t parts, const float* stats, float* logprob, float* lse) override;
  void grpo_token_loss(int64_t n, const float* pw, const float* logp_theta, const float* logp_prev,
                       bool ppo_clip, double clip_low, double clip_high, float* loss, float* coef) override;
  void sum_squares(int64_t n, const float* g, double* sum_sq) override;
  void sample_tokens(int64_t rows, int64_t V, int64_t valid, const float* logits, const SamplingRow* params,
                     int32_t* tokens, float* logprob) override;
  void adamw_update(int64_t n, const AdamWStep& s, const float* grad, float* master, float* m, float* v,
                    ref::bf16* working) override;
  WorkRecorder* recorder() override { return &recorder_; }

 private:
  Context ctx_;
  DeviceBuffer moe_scratch_, gdn_scratch_, attn_scratch_;
  CudaRecorder recorder_;  // after the buffers it names
};

}  // namespace mlpt::ref::cuda
