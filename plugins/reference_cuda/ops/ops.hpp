// The ops interface: everything the device model (device_model/) asks of a backend, and nothing
// else. The model is written once against it; a backend implements it:
//   - backends/cuda/cuda_ops.hpp: the CUDA kernels and cuBLAS, asynchronous on one stream;
//   - backends/cpu/bf16_ops.hpp: the CPU kernels on host memory, storing every bf16 buffer rounded
//     as the CUDA backend stores it: the exact oracle of the GPU's numerics, run in CI.
//
// Conventions (docs/gpu-backend.md): activations and their gradients are bf16; every reduction and
// product accumulates in fp32; the numerically sensitive tensors are fp32 (GDN q, k, gates and
// state; router logits and weights; softmax statistics; weight gradients; the small weights: norms,
// conv, A_log, dt_bias). Pointers are the backend's memory ("device memory": host memory for the
// CPU backend) unless a parameter says "host". Ops may run asynchronously; the memory calls that
// return data to the host wait.
//
// Scratch memory is the backend's own. An Ops object serves one thread at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "ops/bf16.hpp"
#include "ops/shapes.hpp"

namespace mlpt::ref {

class WorkRecorder;

class Ops {
 public:
  virtual ~Ops() = default;
  // For error texts and test output: "cuda", "cpu-bf16".
  virtual const char* name() const = 0;

  // ---- Memory ----------------------------------------------------------------------------
  virtual void* allocate(size_t bytes) = 0;  // uninitialised; throws on failure
  virtual void release(void* p) noexcept = 0;
  // Host → device; returns once `host` may be reused.
  virtual void to_device(void* dst, const void* host, size_t bytes) = 0;
  // Device → host; returns once the bytes have landed (waits for the work queued before).
  virtual void to_host(void* host, const void* src, size_t bytes) = 0;
  virtual void copy(void* dst, const void* src, size_t bytes) = 0;  // device → device
  // `rows` rows of `width` bytes between pitched device buffers.
  virtual void copy_rows(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t width,
                         int64_t rows) = 0;
  virtual void zero(void* p, size_t bytes) = 0;
  virtual void synchronize() = 0;  // all queued work is done

  // ---- Elementwise -----------------------------------------------------------------------
  virtual void to_bf16(int64_t n, const float* x, bf16* y) = 0;
  virtual void to_float(int64_t n, const bf16* x, float* y) = 0;
  virtual void add_inplace(int64_t n, const bf16* x, bf16* y) = 0;  // y += x, in fp32, rounded once
  virtual void add_inplace(int64_t n, const float* x, float* y) = 0;
  // y = x as to_bf16 / a copy does, also marking what changed: bit i % 32 of changed[i / 32] is
  // ORed in where y[i]'s new bits differ from its old ones (a NaN's payload and −0.0 count), the
  // other bits kept. `changed` holds ceil(n / 32) words, element 0 at bit 0 of word 0; on a
  // little-endian machine they are the uint64 words of a refit's change mask
  // (mlpt/sdk/changed_elements.hpp), which the device trainer keeps this way.
  virtual void to_bf16_marking(int64_t n, const float* x, bf16* y, uint32_t* changed) = 0;
  virtual void copy_marking(int64_t n, const float* x, float* y, uint32_t* changed) = 0;

  // ---- Dense products (row-major; W is [N, K]) -------------------------------------------
  // y[M, N] (+)= x[M, K] · Wᵀ.
  virtual void linear_forward(int64_t M, int64_t N, int64_t K, const bf16* x, const bf16* W, bf16* y,
                              bool accumulate = false) = 0;
  // dx[M, K] (+)= dy[M, N] · W.
  virtual void linear_backward_input(int64_t M, int64_t N, int64_t K, const bf16* dy, const bf16* W, bf16* dx,
                                     bool accumulate) = 0;
  // dW[N, K] += dyᵀ · x (fp32).
  virtual void linear_backward_weight(int64_t M, int64_t N, int64_t K, const bf16* dy, const bf16* x,
                                      float* dW) = 0;
  // logits[rows, V] = hidden[rows, H] · Wᵀ in fp32 (router and LM head).
  virtual void logits_forward(int64_t rows, int64_t V, int64_t H, const bf16* hidden, const bf16* W,
                              float* logits) = 0;
  // The rows of `ids` (device int32): x[t] = E[ids[t]]; backward: dE[ids[t]] += dx[t] (fp32). An id
  // < 0 gives a zero row and no gradient (a vocabulary-parallel rank's ids outside its range).
  virtual void embedding_forward(int64_t tokens, int64_t H, const int32_t* ids, const bf16* E, bf16* x) = 0;
  virtual void embedding_backward(int64_t tokens, int64_t H, const int32_t* ids, const bf16* dx,
                                  float* dE) = 0;

  // ---- Norms (w fp32; dw += fp32) ----------------------------------------------------------
  // Zero-centred RMSNorm: y = x / rms(x) · (1 + w).
  virtual void rmsnorm_forward(int64_t rows, int64_t D, const bf16* x, const float* w, double eps,
                               bf16* y) = 0;
  virtual void rmsnorm_backward(int64_t rows, int64_t D, const bf16* x, const float* w, double eps,
                                const bf16* dy, bf16* dx, float* dw) = 0;
  // GDN output norm: y = w · o / rms(o) · silu(z).
  virtual void gated_rmsnorm_forward(int64_t rows, int64_t D, const bf16* o, const bf16* z, const float* w,
                                     double eps, bf16* y) = 0;
  virtual void gated_rmsnorm_backward(int64_t rows, int64_t D, const bf16* o, const bf16* z, const float* w,
                                      double eps, const bf16* dy, bf16* d_o, bf16* dz, float* dw) = 0;
  // Per head: y = scale · x / sqrt(Σx² + eps). Row r = (token r / heads, head r % heads) reads
  // x + (r / heads)·x_stride + (r % heads)·D; y is [rows, D] fp32. Backward writes dx with dx_stride.
  virtual void l2norm_forward(int64_t rows, int64_t heads, int64_t D, const bf16* x, int64_t x_stride,
                              double eps, double scale, float* y) = 0;
  virtual void l2norm_backward(int64_t rows, int64_t heads, int64_t D, const bf16* x, int64_t x_stride,
                               double eps, double scale, const float* dy, bf16* dx, int64_t dx_stride) = 0;

  // ---- Gates and activations (strides in elements) -----------------------------------------
  virtual void gdn_gates_forward(int64_t rows, int64_t Hv, const bf16* a, const bf16* b, const float* a_log,
                                 const float* dt_bias, float* g, float* beta) = 0;
  virtual void gdn_gates_backward(int64_t rows, int64_t Hv, const bf16* a, const bf16* b, const float* a_log,
                                  const float* dt_bias, const float* dg, const float* dbeta, bf16* da,
                                  bf16* db, float* d_a_log, float* d_dt_bias) = 0;
  // y = o · sigmoid(gate) (attention output gate).
  virtual void sigmoid_gate_forward(int64_t rows, int64_t D, const bf16* o, int64_t o_stride,
                                    const bf16* gate, int64_t gate_stride, bf16* y) = 0;
  virtual void sigmoid_gate_backward(int64_t rows, int64_t D, const bf16* o, int64_t o_stride,
                                     const bf16* gate, int64_t gate_stride, const bf16* dy, bf16* d_o,
                                     int64_t d_o_stride, bf16* dgate, int64_t dgate_stride) = 0;
  // h = silu(g) · u.
  virtual void swiglu_forward(int64_t rows, int64_t I, const bf16* g, const bf16* u, int64_t gu_stride,
                              bf16* h) = 0;
  virtual void swiglu_backward(int64_t rows, int64_t I, const bf16* g, const bf16* u, int64_t gu_stride,
                               const bf16* dh, bf16* dg, bf16* du, int64_t dgu_stride) = 0;
  // y[r] += sigmoid(logit[r]) · s[r] (the shared expert's gate).
  virtual void scaled_add_forward(int64_t rows, int64_t H, const bf16* logit, const bf16* s, bf16* y) = 0;
  virtual void scaled_add_backward(int64_t rows, int64_t H, const bf16* logit, const bf16* s, const bf16* dy,
                                   bf16* dlogit, bf16* ds) = 0;
  // Rotary embedding in place on the first rotary_dim of each head; positions device int64 [rows].
  virtual void rope_forward(int64_t rows, int64_t heads, int64_t D, int64_t rotary_dim, double theta,
                            const int64_t* positions, bf16* x) = 0;
  virtual void rope_backward(int64_t rows, int64_t heads, int64_t D, int64_t rotary_dim, double theta,
                             const int64_t* positions, bf16* dx) = 0;

  // ---- Sequence mixers (offsets: device int64 [num_seqs + 1]) -------------------------------
  // Causal depthwise conv + SiLU; `caches`: a device array of device pointers ([K−1, C] bf16
  // windows, NULL entries and a NULL array meaning zeros), updated with `update_caches`.
  virtual void causal_conv_silu_forward(int64_t C, int64_t K, const int64_t* offsets, int64_t num_seqs,
                                        int64_t num_tokens, const bf16* x, const float* w,
                                        bf16* const* caches, bool update_caches, bf16* y) = 0;
  // From zero windows: dx overwritten, dw += (fp32).
  virtual void causal_conv_silu_backward(int64_t C, int64_t K, const int64_t* offsets, int64_t num_seqs,
                                         int64_t num_tokens, const bf16* x, const float* w, const bf16* dy,
                                         bf16* dx, float* dw) = 0;
  // The Gated DeltaNet recurrence, token by token or chunked (the same function); `states` a device
  // array of per-sequence [Hv, dk, dv] fp32 states (read, then overwritten) or NULL (zeros).
  virtual void gdn_recurrent_forward(const GdnShape& shape, const int64_t* offsets, int64_t num_seqs,
                                     const float* q, const float* k, const bf16* v, const float* g,
                                     const float* beta, float* const* states, bf16* out) = 0;
  virtual void gdn_chunked_forward(const GdnShape& shape, const int64_t* offsets, int64_t num_seqs,
                                   const float* q, const float* k, const bf16* v, const float* g,
                                   const float* beta, float* const* states, bf16* out) = 0;
  // From zero states; every output overwritten. host_offsets: the same offsets on the host.
  virtual void gdn_backward(const GdnShape& shape, const int64_t* offsets, const int64_t* host_offsets,
                            int64_t num_seqs, const float* q, const float* k, const bf16* v, const float* g,
                            const float* beta, const bf16* d_out, float* d_q, float* d_k, bf16* d_v,
                            float* d_g, float* d_beta) = 0;
  // Causal GQA attention; the queries of sequence s are the last tokens of its keys. lse [q tokens,
  // heads] fp32 is what this backend's backward needs.
  virtual void attention_forward(const AttentionShape& shape, const int64_t* q_offsets,
                                 const int64_t* kv_offsets, int64_t num_seqs, int64_t num_q_tokens,
                                 const bf16* q, const bf16* k, const bf16* v, bf16* out, float* lse) = 0;
  // Against paged pools [blocks, block_size, Hkv, D]; kv_lengths (device int64) count this step's tokens;
  // block_table device int32 [num_seqs, max_blocks].
  virtual void attention_forward_paged(const AttentionShape& shape, const int64_t* q_offsets,
                                       const int64_t* kv_lengths, int64_t num_seqs, int64_t num_q_tokens,
                                       const bf16* q, const bf16* k_pool, const bf16* v_pool,
                                       const int32_t* block_table, int64_t max_blocks, int64_t block_size,
                                       bf16* out) = 0;
  // Writes this step's keys and values at positions [kv_length − n, kv_length) of each sequence.
  virtual void paged_kv_write(const AttentionShape& shape, const int64_t* q_offsets,
                              const int64_t* kv_lengths, int64_t num_seqs, int64_t num_q_tokens,
                              const bf16* k, const bf16* v, bf16* k_pool, bf16* v_pool,
                              const int32_t* block_table, int64_t max_blocks, int64_t block_size) = 0;
  virtual void attention_backward(const AttentionShape& shape, const int64_t* q_offsets,
                                  const int64_t* kv_offsets, int64_t num_seqs, int64_t num_q_tokens,
                                  int64_t num_kv_tokens, const bf16* q, const bf16* k, const bf16* v,
                                  const bf16* out, const float* lse, const bf16* d_out, bf16* d_q, bf16* d_k,
                                  bf16* d_v) = 0;

  // ---- Mixture of experts --------------------------------------------------------------------
  // Top-k of softmax(logits) (ties to the lower index) or, with `replay` [rows, k], those experts;
  // weights fp32 [rows, k]. bad_replays (device int, may be NULL) counts replayed ids out of range.
  virtual void route(const MoeShape& shape, int64_t rows, const float* logits, const int16_t* replay,
                     int16_t* experts, float* weights, int* bad_replays) = 0;
  virtual void route_backward(const MoeShape& shape, int64_t rows, const float* logits,
                              const int16_t* experts, const float* weights, const float* dweights,
                              float* dlogits) = 0;
  // y[rows, H] += Σ_i w_i · down_e(silu(gate_e x) · up_e x) for the k experts of each row;
  // gate_up [E, 2I, H], down [E, H, I].
  virtual void experts_forward(const MoeShape& shape, int64_t rows, const bf16* x, const int16_t* experts,
                               const float* weights, const bf16* gate_up, const bf16* down, bf16* y) = 0;
  // dx (+)= the experts' input gradient; dweights [rows, k] overwritten; dgate_up, ddown (fp32, may
  // be NULL) accumulate.
  virtual void experts_backward(const MoeShape& shape, int64_t rows, const bf16* x, const int16_t* experts,
                                const float* weights, const bf16* gate_up, const bf16* down, const bf16* dy,
                                bf16* dx, bool accumulate_dx, float* dweights, float* dgate_up,
                                float* ddown) = 0;

  // ---- The trainer's head, loss and optimizer -------------------------------------------------
  // logprob[r] = log_softmax(logits[r, 0:valid])[targets[r]], lse[r] the row's log-sum-exp.
  virtual void token_logprobs(int64_t rows, int64_t V, int64_t valid, const float* logits,
                              const int32_t* targets, float* logprob, float* lse) = 0;
  // dlogits[r, :] = coef[r] · (onehot(targets[r]) − softmax(logits[r, 0:valid])), bf16 (0 on padding
  // ids and on rows with coef 0): the gradient of Σ_r coef[r] · logprob[r]. A target outside [0, V)
  // adds no onehot (a vocabulary-parallel rank's slice, lse the whole row's).
  virtual void token_logprobs_backward(int64_t rows, int64_t V, int64_t valid, const float* logits,
                                       const float* lse, const int32_t* targets, const float* coef,
                                       bf16* dlogits) = 0;
  // A vocabulary-parallel rank's part of each row's log-softmax (device_model/vocab_head.hpp), over
  // its logits [rows, V] whose first `valid` columns are real ids (0 on a rank of padding only):
  // stats[r] = {max, Σ exp(l − max) (fp32), logits[r, targets[r]], 1} where 0 <= targets[r] < V,
  // else the last two 0; max −inf and sum 0 without real ids.
  virtual void vocab_logprob_stats(int64_t rows, int64_t V, int64_t valid, const float* logits,
                                   const int32_t* targets, float* stats) = 0;
  // logprob and lse of each row from every rank's stats ([parts, rows, 4], rank order): the max
  // over the parts, Σ sum_p · exp(max_p − max) in double, the target's logit from its part.
  virtual void vocab_logprob_combine(int64_t rows, int64_t parts, const float* stats, float* logprob,
                                     float* lse) = 0;
  // Per token with weight pw ≠ 0: r = exp(logp_theta − logp_prev); loss = −pw · r, or with ppo_clip
  // −min(pw·r, pw·clip(r, 1 − clip_low, 1 + clip_high)); coef = d loss / d logp_theta (0 where clipped).
  virtual void grpo_token_loss(int64_t n, const float* pw, const float* logp_theta, const float* logp_prev,
                               bool ppo_clip, double clip_low, double clip_high, float* loss,
                               float* coef) = 0;
  // *sum_sq (device double) += Σ g².
  virtual void sum_squares(int64_t n, const float* g, double* sum_sq) = 0;
  // ---- The engine's sampler ------------------------------------------------------------------
  // One id per row from its logits [rows, V] over [0, valid) with params[r] (device array), as
  // model/sampling.hpp's sample_token draws it (without top-k); logprob under the distribution
  // drawn from. A row whose logits are not finite gets token −1.
  virtual void sample_tokens(int64_t rows, int64_t V, int64_t valid, const float* logits,
                             const SamplingRow* params, int32_t* tokens, float* logprob) = 0;

  // AdamW on fp32 master weights and moments; `working` (bf16, may be NULL) gets the new weights.
  virtual void adamw_update(int64_t n, const AdamWStep& s, const float* grad, float* master, float* m,
                            float* v, bf16* working) = 0;

  // ---- Recording (CUDA graphs) ---------------------------------------------------------------
  // The backend's recorder of queued work, or NULL where work cannot be recorded (then callers
  // run the same calls each time).
  virtual WorkRecorder* recorder() { return nullptr; }
};

// Work an Ops queued, recorded once and replayed: every pointer and size the recorded calls were
// given is baked in, so a replay reads and writes exactly the buffers the recording did.
class RecordedWork {
 public:
  virtual ~RecordedWork() = default;
  virtual void replay() = 0;  // queued like any op
};

// Records the ops' work instead of running it (docs/gpu-backend.md, "Decode graphs"). Recorded
// work may not involve the host: no upload, no to_host, no synchronize, no allocation.
class WorkRecorder {
 public:
  virtual ~WorkRecorder() = default;
  virtual void begin_recording() = 0;
  // The work queued since begin_recording; throws naming the failing call if it could not be
  // recorded (the recording is then abandoned and the ops run normally again).
  virtual std::unique_ptr<RecordedWork> end_recording() = 0;
  // While set, ops that have a form without a host round trip take it (the routed experts'
  // device-sized forms), so that their work can be recorded; set it for the unrecorded runs of the
  // same work too, so both compute alike.
  virtual void set_recordable(bool on) = 0;
  // The backend's own scratch memory that ops use (recorded work refers to it; it moves when the
  // scratch grows).
  virtual std::vector<const void*> scratch_addresses() const = 0;
};

// Memory of an Ops backend that frees itself. Empty until the first reserve; bytes uninitialised.
class Buffer {
 public:
  Buffer() = default;
  Buffer(Ops& ops, size_t bytes) { reserve(ops, bytes); }
  ~Buffer() { reset(); }
  Buffer(Buffer&& other) noexcept { *this = std::move(other); }
  Buffer& operator=(Buffer&& other) noexcept {
    if (this != &other) {
      reset();
      ops_ = other.ops_, ptr_ = other.ptr_, bytes_ = other.bytes_;
      other.ops_ = nullptr, other.ptr_ = nullptr, other.bytes_ = 0;
    }
    return *this;
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  void* get() const { return ptr_; }
  template <class T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }
  size_t bytes() const { return bytes_; }
  // Grows (never shrinks) to at least `bytes` of `ops`' memory; contents are lost when it grows.
  void reserve(Ops& ops, size_t bytes) {
    if (ptr_ && bytes <= bytes_ && ops_ == &ops) return;
    reset();
    ptr_ = ops.allocate(bytes);
    ops_ = &ops, bytes_ = bytes;
  }
  void reset() noexcept {
    if (ptr_) ops_->release(ptr_);
    ops_ = nullptr, ptr_ = nullptr, bytes_ = 0;
  }

 private:
  Ops* ops_ = nullptr;
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

// `n` elements of T in `b` (at least one), grown as needed.
template <class T>
T* take(Ops& ops, Buffer& b, int64_t n) {
  b.reserve(ops, size_t(n > 1 ? n : 1) * sizeof(T));
  return b.as<T>();
}

// `host` copied into `b` (grown as needed); returns where it is. host may be reused at return.
template <class T>
T* upload(Ops& ops, Buffer& b, const std::vector<T>& host) {
  T* p = take<T>(ops, b, static_cast<int64_t>(host.size()));
  if (!host.empty()) ops.to_device(p, host.data(), host.size() * sizeof(T));
  return p;
}

}  // namespace mlpt::ref
