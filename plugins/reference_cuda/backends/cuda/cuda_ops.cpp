#include "backends/cuda/cuda_ops.hpp"

#include "backends/cuda/activations.hpp"
#include "backends/cuda/attention.hpp"
#include "backends/cuda/conv.hpp"
#include "backends/cuda/cudnn_attention.hpp"
#include "backends/cuda/embedding.hpp"
#include "backends/cuda/gdn.hpp"
#include "backends/cuda/head.hpp"
#include "backends/cuda/linear.hpp"
#include "backends/cuda/moe.hpp"
#include "backends/cuda/norms.hpp"
#include "backends/cuda/optimizer.hpp"
#include "backends/cuda/rope.hpp"

namespace mlpt::ref::cuda {

void* CudaOps::allocate(size_t bytes) {
  void* p = nullptr;
  check(cudaMalloc(&p, bytes ? bytes : 1), "CudaOps: cudaMalloc");
  return p;
}
void CudaOps::release(void* p) noexcept {
  cudaFree(p);
}
void CudaOps::to_device(void* dst, const void* host, size_t bytes) {
  if (!bytes) return;
  check(cudaMemcpyAsync(dst, host, bytes, cudaMemcpyHostToDevice, ctx_.stream), "CudaOps: to_device");
  // From pageable memory CUDA has staged the bytes when the call returns, so the host buffer may go
  // away without a wait (no round trip per upload inside a forward); a pinned buffer is read by the
  // copy itself, later, so then wait for it.
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, host) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky-free error of an unknown pointer
    a.type = cudaMemoryTypeUnregistered;
  }
  if (a.type != cudaMemoryTypeUnregistered)
    check(cudaStreamSynchronize(ctx_.stream), "CudaOps: to_device");  // the host buffer may go away
}
void CudaOps::to_host(void* host, const void* src, size_t bytes) {
  if (!bytes) return;
  check(cudaMemcpyAsync(host, src, bytes, cudaMemcpyDeviceToHost, ctx_.stream), "CudaOps: to_host");
  check(cudaStreamSynchronize(ctx_.stream), "CudaOps: to_host");
}
void CudaOps::copy(void* dst, const void* src, size_t bytes) {
  if (bytes) check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, ctx_.stream), "CudaOps: copy");
}
void CudaOps::copy_rows(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t width,
                        int64_t rows) {
  if (rows <= 0 || width == 0) return;
  check(cudaMemcpy2DAsync(dst, dst_pitch, src, src_pitch, width, size_t(rows), cudaMemcpyDeviceToDevice,
                          ctx_.stream),
        "CudaOps: copy_rows");
}
void CudaOps::zero(void* p, size_t bytes) {
  if (bytes) check(cudaMemsetAsync(p, 0, bytes, ctx_.stream), "CudaOps: zero");
}
void CudaOps::synchronize() {
  check(cudaStreamSynchronize(ctx_.stream), "CudaOps: synchronize");
}

void CudaOps::to_bf16(int64_t n, const float* x, ref::bf16* y) {
  cuda::to_bf16(ctx_, n, x, as_cuda(y));
}
void CudaOps::to_float(int64_t n, const ref::bf16* x, float* y) {
  cuda::to_float(ctx_, n, as_cuda(x), y);
}
void CudaOps::add_inplace(int64_t n, const ref::bf16* x, ref::bf16* y) {
  cuda::add_inplace(ctx_, n, as_cuda(x), as_cuda(y));
}
void CudaOps::add_inplace(int64_t n, const float* x, float* y) {
  cuda::add_inplace(ctx_, n, x, y);
}
void CudaOps::to_bf16_marking(int64_t n, const float* x, ref::bf16* y, uint32_t* changed) {
  cuda::to_bf16_marking(ctx_, n, x, as_cuda(y), changed);
}
void CudaOps::copy_marking(int64_t n, const float* x, float* y, uint32_t* changed) {
  cuda::copy_marking(ctx_, n, x, y, changed);
}
void CudaOps::linear_forward(int64_t M, int64_t N, int64_t K, const ref::bf16* x, const ref::bf16* W,
                             ref::bf16* y, bool accumulate) {
  cuda::linear_forward(ctx_, M, N, K, as_cuda(x), as_cuda(W), as_cuda(y), accumulate);
}
void CudaOps::linear_backward_input(int64_t M, int64_t N, int64_t K, const ref::bf16* dy, const ref::bf16* W,
                                    ref::bf16* dx, bool accumulate) {
  cuda::linear_backward_input(ctx_, M, N, K, as_cuda(dy), as_cuda(W), as_cuda(dx), accumulate);
}
void CudaOps::linear_backward_weight(int64_t M, int64_t N, int64_t K, const ref::bf16* dy, const ref::bf16* x,
                                     float* dW) {
  cuda::linear_backward_weight(ctx_, M, N, K, as_cuda(dy), as_cuda(x), dW);
}
void CudaOps::logits_forward(int64_t rows, int64_t V, int64_t H, const ref::bf16* hidden, const ref::bf16* W,
                             float* logits) {
  cuda::logits_forward(ctx_, rows, V, H, as_cuda(hidden), as_cuda(W), logits);
}
void CudaOps::embedding_forward(int64_t tokens, int64_t H, const int32_t* ids, const ref::bf16* E,
                                ref::bf16* x) {
  cuda::embedding_forward(ctx_, tokens, H, ids, as_cuda(E), as_cuda(x));
}
void CudaOps::embedding_backward(int64_t tokens, int64_t H, const int32_t* ids, const ref::bf16* dx,
                                 float* dE) {
  cuda::embedding_backward(ctx_, tokens, H, ids, as_cuda(dx), dE);
}
void CudaOps::rmsnorm_forward(int64_t rows, int64_t D, const ref::bf16* x, const float* w, double eps,
                              ref::bf16* y) {
  cuda::rmsnorm_forward(ctx_, rows, D, as_cuda(x), w, eps, as_cuda(y));
}
void CudaOps::rmsnorm_backward(int64_t rows, int64_t D, const ref::bf16* x, const float* w, double eps,
                               const ref::bf16* dy, ref::bf16* dx, float* dw) {
  cuda::rmsnorm_backward(ctx_, rows, D, as_cuda(x), w, eps, as_cuda(dy), as_cuda(dx), dw);
}
void CudaOps::gated_rmsnorm_forward(int64_t rows, int64_t D, const ref::bf16* o, const ref::bf16* z,
                                    const float* w, double eps, ref::bf16* y) {
  cuda::gated_rmsnorm_forward(ctx_, rows, D, as_cuda(o), as_cuda(z), w, eps, as_cuda(y));
}
void CudaOps::gated_rmsnorm_backward(int64_t rows, int64_t D, const ref::bf16* o, const ref::bf16* z,
                                     const float* w, double eps, const ref::bf16* dy, ref::bf16* d_o,
                                     ref::bf16* dz, float* dw) {
  cuda::gated_rmsnorm_backward(ctx_, rows, D, as_cuda(o), as_cuda(z), w, eps, as_cuda(dy), as_cuda(d_o),
                               as_cuda(dz), dw);
}
void CudaOps::l2norm_forward(int64_t rows, int64_t heads, int64_t D, const ref::bf16* x, int64_t x_stride,
                             double eps, double scale, float* y) {
  cuda::l2norm_forward(ctx_, rows, heads, D, as_cuda(x), x_stride, eps, scale, y);
}
void CudaOps::l2norm_backward(int64_t rows, int64_t heads, int64_t D, const ref::bf16* x, int64_t x_stride,
                              double eps, double scale, const float* dy, ref::bf16* dx, int64_t dx_stride) {
  cuda::l2norm_backward(ctx_, rows, heads, D, as_cuda(x), x_stride, eps, scale, dy, as_cuda(dx), dx_stride);
}
void CudaOps::gdn_gates_forward(int64_t rows, int64_t Hv, const ref::bf16* a, const ref::bf16* b,
                                const float* a_log, const float* dt_bias, float* g, float* beta) {
  cuda::gdn_gates_forward(ctx_, rows, Hv, as_cuda(a), as_cuda(b), a_log, dt_bias, g, beta);
}
void CudaOps::gdn_gates_backward(int64_t rows, int64_t Hv, const ref::bf16* a, const ref::bf16* b,
                                 const float* a_log, const float* dt_bias, const float* dg,
                                 const float* dbeta, ref::bf16* da, ref::bf16* db, float* d_a_log,
                                 float* d_dt_bias) {
  cuda::gdn_gates_backward(ctx_, rows, Hv, as_cuda(a), as_cuda(b), a_log, dt_bias, dg, dbeta, as_cuda(da),
                           as_cuda(db), d_a_log, d_dt_bias);
}
void CudaOps::sigmoid_gate_forward(int64_t rows, int64_t D, const ref::bf16* o, int64_t o_stride,
                                   const ref::bf16* gate, int64_t gate_stride, ref::bf16* y) {
  cuda::sigmoid_gate_forward(ctx_, rows, D, as_cuda(o), o_stride, as_cuda(gate), gate_stride, as_cuda(y));
}
void CudaOps::sigmoid_gate_backward(int64_t rows, int64_t D, const ref::bf16* o, int64_t o_stride,
                                    const ref::bf16* gate, int64_t gate_stride, const ref::bf16* dy,
                                    ref::bf16* d_o, int64_t d_o_stride, ref::bf16* dgate,
                                    int64_t dgate_stride) {
  cuda::sigmoid_gate_backward(ctx_, rows, D, as_cuda(o), o_stride, as_cuda(gate), gate_stride, as_cuda(dy),
                              as_cuda(d_o), d_o_stride, as_cuda(dgate), dgate_stride);
}
void CudaOps::swiglu_forward(int64_t rows, int64_t I, const ref::bf16* g, const ref::bf16* u,
                             int64_t gu_stride, ref::bf16* h) {
  cuda::swiglu_forward(ctx_, rows, I, as_cuda(g), as_cuda(u), gu_stride, as_cuda(h));
}
void CudaOps::swiglu_backward(int64_t rows, int64_t I, const ref::bf16* g, const ref::bf16* u,
                              int64_t gu_stride, const ref::bf16* dh, ref::bf16* dg, ref::bf16* du,
                              int64_t dgu_stride) {
  cuda::swiglu_backward(ctx_, rows, I, as_cuda(g), as_cuda(u), gu_stride, as_cuda(dh), as_cuda(dg),
                        as_cuda(du), dgu_stride);
}
void CudaOps::scaled_add_forward(int64_t rows, int64_t H, const ref::bf16* logit, const ref::bf16* s,
                                 ref::bf16* y) {
  cuda::scaled_add_forward(ctx_, rows, H, as_cuda(logit), as_cuda(s), as_cuda(y));
}
void CudaOps::scaled_add_backward(int64_t rows, int64_t H, const ref::bf16* logit, const ref::bf16* s,
                                  const ref::bf16* dy, ref::bf16* dlogit, ref::bf16* ds) {
  cuda::scaled_add_backward(ctx_, rows, H, as_cuda(logit), as_cuda(s), as_cuda(dy), as_cuda(dlogit),
                            as_cuda(ds));
}
void CudaOps::rope_forward(int64_t rows, int64_t heads, int64_t D, int64_t rotary_dim, double theta,
                           const int64_t* positions, ref::bf16* x) {
  cuda::rope_forward(ctx_, rows, heads, D, rotary_dim, theta, positions, as_cuda(x));
}
void CudaOps::rope_backward(int64_t rows, int64_t heads, int64_t D, int64_t rotary_dim, double theta,
                            const int64_t* positions, ref::bf16* dx) {
  cuda::rope_backward(ctx_, rows, heads, D, rotary_dim, theta, positions, as_cuda(dx));
}
void CudaOps::causal_conv_silu_forward(int64_t C, int64_t K, const int64_t* offsets, int64_t num_seqs,
                                       int64_t num_tokens, const ref::bf16* x, const float* w,
                                       ref::bf16* const* caches, bool update_caches, ref::bf16* y) {
  cuda::causal_conv_silu_forward(ctx_, C, K, offsets, num_seqs, num_tokens, as_cuda(x), w,
                                 reinterpret_cast<bf16* const*>(caches), update_caches, as_cuda(y));
}
void CudaOps::causal_conv_silu_backward(int64_t C, int64_t K, const int64_t* offsets, int64_t num_seqs,
                                        int64_t num_tokens, const ref::bf16* x, const float* w,
                                        const ref::bf16* dy, ref::bf16* dx, float* dw) {
  cuda::causal_conv_silu_backward(ctx_, C, K, offsets, num_seqs, num_tokens, as_cuda(x), w, as_cuda(dy),
                                  as_cuda(dx), dw);
}
void CudaOps::gdn_recurrent_forward(const GdnShape& shape, const int64_t* offsets, int64_t num_seqs,
                                    const float* q, const float* k, const ref::bf16* v, const float* g,
                                    const float* beta, float* const* states, ref::bf16* out) {
  cuda::gdn_recurrent_forward(ctx_, shape, offsets, num_seqs, q, k, as_cuda(v), g, beta, states,
                              as_cuda(out));
}
void CudaOps::gdn_chunked_forward(const GdnShape& shape, const int64_t* offsets, int64_t num_seqs,
                                  const float* q, const float* k, const ref::bf16* v, const float* g,
                                  const float* beta, float* const* states, ref::bf16* out) {
  cuda::gdn_chunked_forward(ctx_, shape, offsets, num_seqs, q, k, as_cuda(v), g, beta, states, as_cuda(out));
}
void CudaOps::gdn_backward(const GdnShape& shape, const int64_t* offsets, const int64_t* host_offsets,
                           int64_t num_seqs, const float* q, const float* k, const ref::bf16* v,
                           const float* g, const float* beta, const ref::bf16* d_out, float* d_q, float* d_k,
                           ref::bf16* d_v, float* d_g, float* d_beta) {
  cuda::gdn_backward(ctx_, shape, offsets, host_offsets, num_seqs, q, k, as_cuda(v), g, beta, as_cuda(d_out),
                     d_q, d_k, as_cuda(d_v), d_g, d_beta, gdn_scratch_);
}
void CudaOps::attention_forward(const AttentionShape& shape, const int64_t* q_offsets,
                                const int64_t* kv_offsets, int64_t num_seqs, int64_t num_q_tokens,
                                const ref::bf16* q, const ref::bf16* k, const ref::bf16* v, ref::bf16* out,
                                float* lse) {
  if (ctx_.attention && ctx_.attention->forward(shape, q_offsets, kv_offsets, num_seqs, num_q_tokens,
                                                as_cuda(q), as_cuda(k), as_cuda(v), as_cuda(out), lse))
    return;
  cuda::attention_forward(ctx_, shape, q_offsets, kv_offsets, num_seqs, num_q_tokens, as_cuda(q), as_cuda(k),
                          as_cuda(v), as_cuda(out), lse);
}
void CudaOps::attention_forward_paged(const AttentionShape& shape, const int64_t* q_offsets,
                                      const int64_t* kv_lengths, int64_t num_seqs, int64_t num_q_tokens,
                                      const ref::bf16* q, const ref::bf16* k_pool, const ref::bf16* v_pool,
                                      const int32_t* block_table, int64_t max_blocks, int64_t block_size,
                                      ref::bf16* out) {
  if (ctx_.attention) {
    ctx_.attention->forward_paged(shape, q_offsets, kv_lengths, num_seqs, num_q_tokens, as_cuda(q),
                                  as_cuda(k_pool), as_cuda(v_pool), block_table, max_blocks, block_size,
                                  as_cuda(out));
    return;
  }
  cuda::attention_forward_paged(ctx_, shape, q_offsets, kv_lengths, num_seqs, num_q_tokens, as_cuda(q),
                                as_cuda(k_pool), as_cuda(v_pool), block_table, max_blocks, block_size,
                                as_cuda(out));
}
void CudaOps::paged_kv_write(const AttentionShape& shape, const int64_t* q_offsets, const int64_t* kv_lengths,
                             int64_t num_seqs, int64_t num_q_tokens, const ref::bf16* k, const ref::bf16* v,
                             ref::bf16* k_pool, ref::bf16* v_pool, const int32_t* block_table,
                             int64_t max_blocks, int64_t block_size) {
  cuda::paged_kv_write(ctx_, shape, q_offsets, kv_lengths, num_seqs, num_q_tokens, as_cuda(k), as_cuda(v),
                       as_cuda(k_pool), as_cuda(v_pool), block_table, max_blocks, block_size);
}
void CudaOps::attention_backward(const AttentionShape& shape, const int64_t* q_offsets,
                                 const int64_t* kv_offsets, int64_t num_seqs, int64_t num_q_tokens,
                                 int64_t num_kv_tokens, const ref::bf16* q, const ref::bf16* k,
                                 const ref::bf16* v, const ref::bf16* out, const float* lse,
                                 const ref::bf16* d_out, ref::bf16* d_q, ref::bf16* d_k, ref::bf16* d_v) {
  if (ctx_.attention) {
    ctx_.attention->backward(shape, q_offsets, kv_offsets, num_seqs, num_q_tokens, num_kv_tokens, as_cuda(q),
                             as_cuda(k), as_cuda(v), as_cuda(out), lse, as_cuda(d_out), as_cuda(d_q),
                             as_cuda(d_k), as_cuda(d_v));
    return;
  }
  cuda::attention_backward(ctx_, shape, q_offsets, kv_offsets, num_seqs, num_q_tokens, num_kv_tokens,
                           as_cuda(q), as_cuda(k), as_cuda(v), as_cuda(out), lse, as_cuda(d_out),
                           as_cuda(d_q), as_cuda(d_k), as_cuda(d_v), attn_scratch_);
}
void CudaOps::route(const MoeShape& shape, int64_t rows, const float* logits, const int16_t* replay,
                    int16_t* experts, float* weights, int* bad_replays) {
  cuda::route(ctx_, shape, rows, logits, replay, experts, weights, bad_replays);
}
void CudaOps::route_backward(const MoeShape& shape, int64_t rows, const float* logits, const int16_t* experts,
                             const float* weights, const float* dweights, float* dlogits) {
  cuda::route_backward(ctx_, shape, rows, logits, experts, weights, dweights, dlogits);
}
void CudaOps::experts_forward(const MoeShape& shape, int64_t rows, const ref::bf16* x, const int16_t* experts,
                              const float* weights, const ref::bf16* gate_up, const ref::bf16* down,
                              ref::bf16* y) {
  cuda::experts_forward(ctx_, shape, rows, as_cuda(x), experts, weights, as_cuda(gate_up), as_cuda(down),
                        as_cuda(y), moe_scratch_);
}
void CudaOps::experts_backward(const MoeShape& shape, int64_t rows, const ref::bf16* x,
                               const int16_t* experts, const float* weights, const ref::bf16* gate_up,
                               const ref::bf16* down, const ref::bf16* dy, ref::bf16* dx, bool accumulate_dx,
                               float* dweights, float* dgate_up, float* ddown) {
  cuda::experts_backward(ctx_, shape, rows, as_cuda(x), experts, weights, as_cuda(gate_up), as_cuda(down),
                         as_cuda(dy), as_cuda(dx), accumulate_dx, dweights, dgate_up, ddown, moe_scratch_);
}

void CudaOps::token_logprobs(int64_t rows, int64_t V, int64_t valid, const float* logits,
                             const int32_t* targets, float* logprob, float* lse) {
  cuda::token_logprobs(ctx_, rows, V, valid, logits, targets, logprob, lse);
}
void CudaOps::token_logprobs_backward(int64_t rows, int64_t V, int64_t valid, const float* logits,
                                      const float* lse, const int32_t* targets, const float* coef,
                                      ref::bf16* dlogits) {
  cuda::token_logprobs_backward(ctx_, rows, V, valid, logits, lse, targets, coef, as_cuda(dlogits));
}
void CudaOps::vocab_logprob_stats(int64_t rows, int64_t V, int64_t valid, const float* logits,
                                  const int32_t* targets, float* stats) {
  cuda::vocab_logprob_stats(ctx_, rows, V, valid, logits, targets, stats);
}
void CudaOps::vocab_logprob_combine(int64_t rows, int64_t parts, const float* stats, float* logprob,
                                    float* lse) {
  cuda::vocab_logprob_combine(ctx_, rows, parts, stats, logprob, lse);
}
void CudaOps::grpo_token_loss(int64_t n, const float* pw, const float* logp_theta, const float* logp_prev,
                              bool ppo_clip, double clip_low, double clip_high, float* loss, float* coef) {
  cuda::grpo_token_loss(ctx_, n, pw, logp_theta, logp_prev, ppo_clip, clip_low, clip_high, loss, coef);
}
void CudaOps::sample_tokens(int64_t rows, int64_t V, int64_t valid, const float* logits,
                            const SamplingRow* params, int32_t* tokens, float* logprob) {
  cuda::sample_tokens(ctx_, rows, V, valid, logits, params, tokens, logprob);
}
void CudaOps::sum_squares(int64_t n, const float* g, double* sum_sq) {
  cuda::sum_squares(ctx_, n, g, sum_sq);
}
void CudaOps::adamw_update(int64_t n, const AdamWStep& s, const float* grad, float* master, float* m,
                           float* v, ref::bf16* working) {
  cuda::adamw_update(ctx_, n, s, grad, master, m, v, as_cuda(working));
}

}  // namespace mlpt::ref::cuda
