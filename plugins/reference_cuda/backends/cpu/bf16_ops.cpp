// Each op: widen the bf16 inputs, run this folder's fp32 kernel, round each bf16 output once. Where
// a CUDA op keeps bf16 intermediates (moe.cu's routed experts), the same intermediates are rounded
// here in the same order of operations.
#include "backends/cpu/bf16_ops.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#include "backends/cpu/activations.hpp"
#include "backends/cpu/attention.hpp"
#include "backends/cpu/conv.hpp"
#include "backends/cpu/gdn.hpp"
#include "backends/cpu/linear.hpp"
#include "backends/cpu/moe.hpp"
#include "backends/cpu/norms.hpp"
#include "backends/cpu/rope.hpp"
#include "model/sampling.hpp"

namespace mlpt::ref::cpu {

namespace {

using F = std::vector<float>;

F widen(const bf16* p, int64_t n) {
  F out(static_cast<size_t>(std::max<int64_t>(n, 0)));
  for (int64_t i = 0; i < n; ++i) out[size_t(i)] = ref::to_float(p[i]);
  return out;
}
void narrow(const float* x, int64_t n, bf16* y) {
  for (int64_t i = 0; i < n; ++i) y[i] = ref::to_bf16(x[i]);
}
// rows x D elements read from / written to a buffer with a row stride.
F widen_rows(const bf16* p, int64_t rows, int64_t D, int64_t stride) {
  F out(static_cast<size_t>(rows * D));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < D; ++c) out[size_t(r * D + c)] = ref::to_float(p[r * stride + c]);
  return out;
}
void narrow_rows(const float* x, int64_t rows, int64_t D, bf16* p, int64_t stride) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < D; ++c) p[r * stride + c] = ref::to_bf16(x[r * D + c]);
}
void round_in_place(F& x) {
  for (float& v : x) v = round_bf16(v);
}

// Per (token, head) rows of a strided [tokens, stride] buffer, as l2norm reads them.
F gather_heads(const bf16* x, int64_t rows, int64_t heads, int64_t D, int64_t stride) {
  F out(static_cast<size_t>(rows * D));
  for (int64_t r = 0; r < rows; ++r) {
    const bf16* src = x + (r / heads) * stride + (r % heads) * D;
    for (int64_t c = 0; c < D; ++c) out[size_t(r * D + c)] = ref::to_float(src[c]);
  }
  return out;
}

}  // namespace

// ---- Memory ----------------------------------------------------------------------------------

void* Bf16Ops::allocate(size_t bytes) {
  void* p = std::aligned_alloc(64, (std::max<size_t>(bytes, 1) + 63) / 64 * 64);
  if (!p) throw std::bad_alloc();
  std::lock_guard lock(allocations_mutex_);
  allocations_[p] = bytes;
  live_bytes_ += bytes;
  peak_bytes_ = std::max(peak_bytes_, live_bytes_);
  return p;
}
void Bf16Ops::release(void* p) noexcept {
  if (!p) return;
  {
    std::lock_guard lock(allocations_mutex_);
    auto it = allocations_.find(p);
    if (it != allocations_.end()) live_bytes_ -= it->second, allocations_.erase(it);
  }
  std::free(p);
}
size_t Bf16Ops::live_bytes() const {
  std::lock_guard lock(allocations_mutex_);
  return live_bytes_;
}
size_t Bf16Ops::peak_bytes() const {
  std::lock_guard lock(allocations_mutex_);
  return peak_bytes_;
}
void Bf16Ops::reset_peak() {
  std::lock_guard lock(allocations_mutex_);
  peak_bytes_ = live_bytes_;
}
void Bf16Ops::to_device(void* dst, const void* host, size_t bytes) {
  if (bytes) std::memcpy(dst, host, bytes);
}
void Bf16Ops::to_host(void* host, const void* src, size_t bytes) {
  if (bytes) std::memcpy(host, src, bytes);
}
void Bf16Ops::copy(void* dst, const void* src, size_t bytes) {
  if (bytes && dst != src) std::memmove(dst, src, bytes);
}
void Bf16Ops::copy_rows(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t width,
                        int64_t rows) {
  for (int64_t r = 0; r < rows; ++r)
    std::memmove(static_cast<char*>(dst) + size_t(r) * dst_pitch,
                 static_cast<const char*>(src) + size_t(r) * src_pitch, width);
}
void Bf16Ops::zero(void* p, size_t bytes) {
  if (bytes) std::memset(p, 0, bytes);
}

// ---- Elementwise -----------------------------------------------------------------------------

void Bf16Ops::to_bf16(int64_t n, const float* x, bf16* y) {
  narrow(x, n, y);
}
void Bf16Ops::to_float(int64_t n, const bf16* x, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] = ref::to_float(x[i]);
}
void Bf16Ops::add_inplace(int64_t n, const bf16* x, bf16* y) {
  for (int64_t i = 0; i < n; ++i) y[i] = ref::to_bf16(ref::to_float(y[i]) + ref::to_float(x[i]));
}
void Bf16Ops::add_inplace(int64_t n, const float* x, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] += x[i];
}
void Bf16Ops::to_bf16_marking(int64_t n, const float* x, bf16* y, uint32_t* changed) {
  for (int64_t i = 0; i < n; ++i) {
    const bf16 b = ref::to_bf16(x[i]);
    if (b.bits != y[i].bits) changed[i / 32] |= uint32_t{1} << (i % 32);
    y[i] = b;
  }
}
void Bf16Ops::copy_marking(int64_t n, const float* x, float* y, uint32_t* changed) {
  for (int64_t i = 0; i < n; ++i) {
    if (std::memcmp(&x[i], &y[i], sizeof(float)) != 0) changed[i / 32] |= uint32_t{1} << (i % 32);
    y[i] = x[i];
  }
}

// ---- Dense products --------------------------------------------------------------------------

void Bf16Ops::linear_forward(int64_t M, int64_t N, int64_t K, const bf16* x, const bf16* W, bf16* y,
                             bool accumulate) {
  if (M == 0 || N == 0) return;
  F Y = accumulate ? widen(y, M * N) : F(size_t(M * N), 0.f);
  if (K > 0)
    cpu::linear_forward<float>(M, N, K, widen(x, M * K).data(), widen(W, N * K).data(), Y.data(), accumulate);
  narrow(Y.data(), M * N, y);
}
void Bf16Ops::linear_backward_input(int64_t M, int64_t N, int64_t K, const bf16* dy, const bf16* W, bf16* dx,
                                    bool accumulate) {
  if (M == 0 || K == 0) return;
  F DX = accumulate ? widen(dx, M * K) : F(size_t(M * K), 0.f);
  if (N > 0)
    cpu::linear_backward_input<float>(M, N, K, widen(dy, M * N).data(), widen(W, N * K).data(), DX.data(),
                                      accumulate);
  narrow(DX.data(), M * K, dx);
}
void Bf16Ops::linear_backward_weight(int64_t M, int64_t N, int64_t K, const bf16* dy, const bf16* x,
                                     float* dW) {
  if (M == 0 || N == 0 || K == 0) return;
  cpu::linear_backward_weight<float>(M, N, K, widen(dy, M * N).data(), widen(x, M * K).data(), dW);
}
void Bf16Ops::logits_forward(int64_t rows, int64_t V, int64_t H, const bf16* hidden, const bf16* W,
                             float* logits) {
  if (rows == 0 || V == 0) return;
  cpu::linear_forward<float>(rows, V, H, widen(hidden, rows * H).data(), widen(W, V * H).data(), logits);
}
void Bf16Ops::embedding_forward(int64_t tokens, int64_t H, const int32_t* ids, const bf16* E, bf16* x) {
  for (int64_t t = 0; t < tokens; ++t)
    if (ids[t] >= 0)
      std::memcpy(x + t * H, E + int64_t(ids[t]) * H, size_t(H) * sizeof(bf16));
    else
      std::fill(x + t * H, x + (t + 1) * H, ref::to_bf16(0.f));
}
void Bf16Ops::embedding_backward(int64_t tokens, int64_t H, const int32_t* ids, const bf16* dx, float* dE) {
  for (int64_t t = 0; t < tokens; ++t)
    if (ids[t] >= 0)
      for (int64_t i = 0; i < H; ++i) dE[int64_t(ids[t]) * H + i] += ref::to_float(dx[t * H + i]);
}

// ---- Norms -----------------------------------------------------------------------------------

void Bf16Ops::rmsnorm_forward(int64_t rows, int64_t D, const bf16* x, const float* w, double eps, bf16* y) {
  F Y(size_t(rows * D));
  cpu::rmsnorm_forward<float>(rows, D, widen(x, rows * D).data(), w, eps, Y.data());
  narrow(Y.data(), rows * D, y);
}
void Bf16Ops::rmsnorm_backward(int64_t rows, int64_t D, const bf16* x, const float* w, double eps,
                               const bf16* dy, bf16* dx, float* dw) {
  F DX(size_t(rows * D));
  cpu::rmsnorm_backward<float>(rows, D, widen(x, rows * D).data(), w, eps, widen(dy, rows * D).data(),
                               DX.data(), dw);
  narrow(DX.data(), rows * D, dx);
}
void Bf16Ops::gated_rmsnorm_forward(int64_t rows, int64_t D, const bf16* o, const bf16* z, const float* w,
                                    double eps, bf16* y) {
  F Y(size_t(rows * D));
  cpu::gated_rmsnorm_forward<float>(rows, D, widen(o, rows * D).data(), widen(z, rows * D).data(), w, eps,
                                    Y.data());
  narrow(Y.data(), rows * D, y);
}
void Bf16Ops::gated_rmsnorm_backward(int64_t rows, int64_t D, const bf16* o, const bf16* z, const float* w,
                                     double eps, const bf16* dy, bf16* d_o, bf16* dz, float* dw) {
  F DO(size_t(rows * D)), DZ(size_t(rows * D));
  cpu::gated_rmsnorm_backward<float>(rows, D, widen(o, rows * D).data(), widen(z, rows * D).data(), w, eps,
                                     widen(dy, rows * D).data(), DO.data(), DZ.data(), dw);
  narrow(DO.data(), rows * D, d_o);
  narrow(DZ.data(), rows * D, dz);
}
void Bf16Ops::l2norm_forward(int64_t rows, int64_t heads, int64_t D, const bf16* x, int64_t x_stride,
                             double eps, double scale, float* y) {
  if (rows <= 0) return;
  cpu::l2norm_forward<float>(rows, D, gather_heads(x, rows, heads, D, x_stride).data(), D, eps, scale, y);
}
void Bf16Ops::l2norm_backward(int64_t rows, int64_t heads, int64_t D, const bf16* x, int64_t x_stride,
                              double eps, double scale, const float* dy, bf16* dx, int64_t dx_stride) {
  if (rows <= 0) return;
  F DX(size_t(rows * D));
  cpu::l2norm_backward<float>(rows, D, gather_heads(x, rows, heads, D, x_stride).data(), D, eps, scale, dy,
                              DX.data(), D);
  for (int64_t r = 0; r < rows; ++r)
    narrow(DX.data() + r * D, D, dx + (r / heads) * dx_stride + (r % heads) * D);
}

// ---- Gates and activations -------------------------------------------------------------------

void Bf16Ops::gdn_gates_forward(int64_t rows, int64_t Hv, const bf16* a, const bf16* b, const float* a_log,
                                const float* dt_bias, float* g, float* beta) {
  cpu::gdn_gates_forward<float>(rows, Hv, widen(a, rows * Hv).data(), widen(b, rows * Hv).data(), a_log,
                                dt_bias, g, beta);
}
void Bf16Ops::gdn_gates_backward(int64_t rows, int64_t Hv, const bf16* a, const bf16* b, const float* a_log,
                                 const float* dt_bias, const float* dg, const float* dbeta, bf16* da,
                                 bf16* db, float* d_a_log, float* d_dt_bias) {
  F DA(size_t(rows * Hv)), DB(size_t(rows * Hv));
  cpu::gdn_gates_backward<float>(rows, Hv, widen(a, rows * Hv).data(), widen(b, rows * Hv).data(), a_log,
                                 dt_bias, dg, dbeta, DA.data(), DB.data(), d_a_log, d_dt_bias);
  narrow(DA.data(), rows * Hv, da);
  narrow(DB.data(), rows * Hv, db);
}
void Bf16Ops::sigmoid_gate_forward(int64_t rows, int64_t D, const bf16* o, int64_t o_stride, const bf16* gate,
                                   int64_t gate_stride, bf16* y) {
  F Y(size_t(rows * D));
  cpu::sigmoid_gate_forward<float>(rows, D, widen_rows(o, rows, D, o_stride).data(), D,
                                   widen_rows(gate, rows, D, gate_stride).data(), D, Y.data());
  narrow(Y.data(), rows * D, y);
}
void Bf16Ops::sigmoid_gate_backward(int64_t rows, int64_t D, const bf16* o, int64_t o_stride,
                                    const bf16* gate, int64_t gate_stride, const bf16* dy, bf16* d_o,
                                    int64_t d_o_stride, bf16* dgate, int64_t dgate_stride) {
  F DO(size_t(rows * D)), DG(size_t(rows * D));
  cpu::sigmoid_gate_backward<float>(rows, D, widen_rows(o, rows, D, o_stride).data(), D,
                                    widen_rows(gate, rows, D, gate_stride).data(), D,
                                    widen(dy, rows * D).data(), DO.data(), D, DG.data(), D);
  narrow_rows(DO.data(), rows, D, d_o, d_o_stride);
  narrow_rows(DG.data(), rows, D, dgate, dgate_stride);
}
void Bf16Ops::swiglu_forward(int64_t rows, int64_t I, const bf16* g, const bf16* u, int64_t gu_stride,
                             bf16* h) {
  F Hh(size_t(rows * I));
  cpu::swiglu_forward<float>(rows, I, widen_rows(g, rows, I, gu_stride).data(),
                             widen_rows(u, rows, I, gu_stride).data(), I, Hh.data());
  narrow(Hh.data(), rows * I, h);
}
void Bf16Ops::swiglu_backward(int64_t rows, int64_t I, const bf16* g, const bf16* u, int64_t gu_stride,
                              const bf16* dh, bf16* dg, bf16* du, int64_t dgu_stride) {
  F DG(size_t(rows * I)), DU(size_t(rows * I));
  cpu::swiglu_backward<float>(rows, I, widen_rows(g, rows, I, gu_stride).data(),
                              widen_rows(u, rows, I, gu_stride).data(), I, widen(dh, rows * I).data(),
                              DG.data(), DU.data(), I);
  narrow_rows(DG.data(), rows, I, dg, dgu_stride);
  narrow_rows(DU.data(), rows, I, du, dgu_stride);
}
void Bf16Ops::scaled_add_forward(int64_t rows, int64_t H, const bf16* logit, const bf16* s, bf16* y) {
  for (int64_t r = 0; r < rows; ++r) {
    const float sg = cpu::sigmoid(ref::to_float(logit[r]));
    for (int64_t c = 0; c < H; ++c)
      y[r * H + c] = ref::to_bf16(ref::to_float(y[r * H + c]) + sg * ref::to_float(s[r * H + c]));
  }
}
void Bf16Ops::scaled_add_backward(int64_t rows, int64_t H, const bf16* logit, const bf16* s, const bf16* dy,
                                  bf16* dlogit, bf16* ds) {
  for (int64_t r = 0; r < rows; ++r) {
    const float sg = cpu::sigmoid(ref::to_float(logit[r]));
    float dot = 0.f;
    for (int64_t c = 0; c < H; ++c) {
      const float d = ref::to_float(dy[r * H + c]);
      dot += d * ref::to_float(s[r * H + c]);
      ds[r * H + c] = ref::to_bf16(sg * d);
    }
    dlogit[r] = ref::to_bf16(dot * sg * (1.f - sg));
  }
}
void Bf16Ops::rope_forward(int64_t rows, int64_t heads, int64_t D, int64_t rotary_dim, double theta,
                           const int64_t* positions, bf16* x) {
  F X = widen(x, rows * heads * D);
  cpu::rope_forward<float>(rows, heads, D, rotary_dim, theta, positions, X.data());
  narrow(X.data(), rows * heads * D, x);
}
void Bf16Ops::rope_backward(int64_t rows, int64_t heads, int64_t D, int64_t rotary_dim, double theta,
                            const int64_t* positions, bf16* dx) {
  F X = widen(dx, rows * heads * D);
  cpu::rope_backward<float>(rows, heads, D, rotary_dim, theta, positions, X.data());
  narrow(X.data(), rows * heads * D, dx);
}

// ---- Sequence mixers -------------------------------------------------------------------------

void Bf16Ops::causal_conv_silu_forward(int64_t C, int64_t K, const int64_t* offsets, int64_t num_seqs,
                                       int64_t num_tokens, const bf16* x, const float* w, bf16* const* caches,
                                       bool update_caches, bf16* y) {
  const int64_t W = K - 1;
  std::vector<F> windows(static_cast<size_t>(num_seqs));
  std::vector<float*> ptrs(static_cast<size_t>(num_seqs), nullptr);
  for (int64_t s = 0; s < num_seqs; ++s)
    if (caches && caches[s]) {
      windows[size_t(s)] = widen(caches[s], W * C);
      ptrs[size_t(s)] = windows[size_t(s)].data();
    }
  F Y(size_t(num_tokens * C));
  cpu::causal_conv_silu_forward<float>(C, K, offsets, size_t(num_seqs), widen(x, num_tokens * C).data(), w,
                                       ptrs.data(), update_caches, Y.data());
  narrow(Y.data(), num_tokens * C, y);
  if (update_caches)
    for (int64_t s = 0; s < num_seqs; ++s)
      if (ptrs[size_t(s)]) narrow(ptrs[size_t(s)], W * C, caches[s]);
}
void Bf16Ops::causal_conv_silu_backward(int64_t C, int64_t K, const int64_t* offsets, int64_t num_seqs,
                                        int64_t num_tokens, const bf16* x, const float* w, const bf16* dy,
                                        bf16* dx, float* dw) {
  F DX(size_t(num_tokens * C), 0.f);
  cpu::causal_conv_silu_backward<float>(C, K, offsets, size_t(num_seqs), widen(x, num_tokens * C).data(), w,
                                        widen(dy, num_tokens * C).data(), DX.data(), dw);
  narrow(DX.data(), num_tokens * C, dx);
}

namespace {
// Runs `form` (chunked or recurrent) one sequence at a time, each from and back into its state.
template <class Form>
void gdn_forward_emulated(Form form, const GdnShape& shape, const int64_t* offsets, int64_t num_seqs,
                          const float* q, const float* k, const bf16* v, const float* g, const float* beta,
                          float* const* states, bf16* out) {
  const int64_t T = num_seqs ? offsets[num_seqs] : 0, vd = shape.num_value_heads * shape.value_dim;
  const int64_t SS = shape.num_value_heads * shape.key_dim * shape.value_dim;
  const F V = widen(v, T * vd);
  F O(size_t(T * vd), 0.f), init;
  for (int64_t s = 0; s < num_seqs; ++s) {
    if (offsets[s + 1] == offsets[s]) continue;
    float* state = states ? states[s] : nullptr;
    if (state) init.assign(state, state + SS);
    form(shape, offsets + s, 1, q, k, V.data(), g, beta, state ? init.data() : nullptr, O.data(), state);
  }
  narrow(O.data(), T * vd, out);
}
}  // namespace

void Bf16Ops::gdn_recurrent_forward(const GdnShape& shape, const int64_t* offsets, int64_t num_seqs,
                                    const float* q, const float* k, const bf16* v, const float* g,
                                    const float* beta, float* const* states, bf16* out) {
  gdn_forward_emulated(&cpu::gdn_recurrent_forward<float>, shape, offsets, num_seqs, q, k, v, g, beta, states,
                       out);
}
void Bf16Ops::gdn_chunked_forward(const GdnShape& shape, const int64_t* offsets, int64_t num_seqs,
                                  const float* q, const float* k, const bf16* v, const float* g,
                                  const float* beta, float* const* states, bf16* out) {
  gdn_forward_emulated(&cpu::gdn_chunked_forward<float>, shape, offsets, num_seqs, q, k, v, g, beta, states,
                       out);
}
void Bf16Ops::gdn_backward(const GdnShape& shape, const int64_t* offsets, const int64_t*, int64_t num_seqs,
                           const float* q, const float* k, const bf16* v, const float* g, const float* beta,
                           const bf16* d_out, float* d_q, float* d_k, bf16* d_v, float* d_g, float* d_beta) {
  const int64_t T = num_seqs ? offsets[num_seqs] : 0, vd = shape.num_value_heads * shape.value_dim;
  F DV(size_t(T * vd));
  cpu::gdn_backward<float>(shape, offsets, size_t(num_seqs), q, k, widen(v, T * vd).data(), g, beta, nullptr,
                           widen(d_out, T * vd).data(), nullptr, d_q, d_k, DV.data(), d_g, d_beta, nullptr);
  narrow(DV.data(), T * vd, d_v);
}

void Bf16Ops::attention_forward(const AttentionShape& shape, const int64_t* q_offsets,
                                const int64_t* kv_offsets, int64_t num_seqs, int64_t num_q_tokens,
                                const bf16* q, const bf16* k, const bf16* v, bf16* out, float* lse) {
  const int64_t H = shape.num_heads, Hkv = shape.num_kv_heads, D = shape.head_dim;
  const int64_t Tkv = num_seqs ? kv_offsets[num_seqs] : 0;
  const F Q = widen(q, num_q_tokens * H * D), Kf = widen(k, Tkv * Hkv * D), Vf = widen(v, Tkv * Hkv * D);
  F O(size_t(num_q_tokens * H * D));
  cpu::attention_forward<float>(shape, q_offsets, kv_offsets, size_t(num_seqs), Q.data(), Kf.data(),
                                Vf.data(), O.data());
  narrow(O.data(), num_q_tokens * H * D, out);
  if (!lse) return;
  // The softmax statistics the CUDA backward keeps: log Σ_j exp(q·k_j / √D) over the causal keys.
  const float scale = 1.f / std::sqrt(float(D));
  for (int64_t s = 0; s < num_seqs; ++s) {
    const int64_t nq = q_offsets[s + 1] - q_offsets[s], nk = kv_offsets[s + 1] - kv_offsets[s];
    for (int64_t i = 0; i < nq; ++i)
      for (int64_t h = 0; h < H; ++h) {
        const float* qi = Q.data() + ((q_offsets[s] + i) * H + h) * D;
        const int64_t last = nk - nq + i, hk = h / (H / Hkv);
        float mx = -INFINITY;
        std::vector<float> sc(size_t(last + 1));
        for (int64_t j = 0; j <= last; ++j) {
          const float* kj = Kf.data() + ((kv_offsets[s] + j) * Hkv + hk) * D;
          float dot = 0.f;
          for (int64_t d = 0; d < D; ++d) dot += qi[d] * kj[d];
          sc[size_t(j)] = dot * scale;
          mx = std::max(mx, sc[size_t(j)]);
        }
        float sum = 0.f;
        for (float x : sc) sum += std::exp(x - mx);
        lse[(q_offsets[s] + i) * H + h] = mx + std::log(sum);
      }
  }
}
void Bf16Ops::attention_forward_paged(const AttentionShape& shape, const int64_t* q_offsets,
                                      const int64_t* kv_lengths, int64_t num_seqs, int64_t num_q_tokens,
                                      const bf16* q, const bf16* k_pool, const bf16* v_pool,
                                      const int32_t* block_table, int64_t max_blocks, int64_t block_size,
                                      bf16* out) {
  const int64_t H = shape.num_heads, row = shape.num_kv_heads * shape.head_dim, D = shape.head_dim;
  const F Q = widen(q, num_q_tokens * H * D);
  F O(size_t(num_q_tokens * H * D), 0.f);
  for (int64_t s = 0; s < num_seqs; ++s) {
    const int64_t nq = q_offsets[s + 1] - q_offsets[s], L = kv_lengths[s];
    if (nq == 0) continue;
    F Kf(size_t(L * row)), Vf(size_t(L * row));
    for (int64_t p = 0; p < L; ++p) {
      const int64_t at =
          (int64_t(block_table[s * max_blocks + p / block_size]) * block_size + p % block_size) * row;
      for (int64_t c = 0; c < row; ++c) {
        Kf[size_t(p * row + c)] = ref::to_float(k_pool[at + c]);
        Vf[size_t(p * row + c)] = ref::to_float(v_pool[at + c]);
      }
    }
    const int64_t qo[2] = {0, nq}, ko[2] = {0, L};
    cpu::attention_forward<float>(shape, qo, ko, 1, Q.data() + q_offsets[s] * H * D, Kf.data(), Vf.data(),
                                  O.data() + q_offsets[s] * H * D);
  }
  narrow(O.data(), num_q_tokens * H * D, out);
}
void Bf16Ops::paged_kv_write(const AttentionShape& shape, const int64_t* q_offsets, const int64_t* kv_lengths,
                             int64_t num_seqs, int64_t, const bf16* k, const bf16* v, bf16* k_pool,
                             bf16* v_pool, const int32_t* block_table, int64_t max_blocks,
                             int64_t block_size) {
  const int64_t row = shape.num_kv_heads * shape.head_dim;
  for (int64_t s = 0; s < num_seqs; ++s) {
    const int64_t n = q_offsets[s + 1] - q_offsets[s];
    for (int64_t i = 0; i < n; ++i) {
      const int64_t p = kv_lengths[s] - n + i;
      const int64_t at =
          (int64_t(block_table[s * max_blocks + p / block_size]) * block_size + p % block_size) * row;
      std::memcpy(k_pool + at, k + (q_offsets[s] + i) * row, size_t(row) * sizeof(bf16));
      std::memcpy(v_pool + at, v + (q_offsets[s] + i) * row, size_t(row) * sizeof(bf16));
    }
  }
}
void Bf16Ops::attention_backward(const AttentionShape& shape, const int64_t* q_offsets,
                                 const int64_t* kv_offsets, int64_t num_seqs, int64_t num_q_tokens,
                                 int64_t num_kv_tokens, const bf16* q, const bf16* k, const bf16* v,
                                 const bf16*, const float*, const bf16* d_out, bf16* d_q, bf16* d_k,
                                 bf16* d_v) {
  const int64_t H = shape.num_heads, Hkv = shape.num_kv_heads, D = shape.head_dim;
  F DQ(size_t(num_q_tokens * H * D), 0.f), DK(size_t(num_kv_tokens * Hkv * D), 0.f),
      DV(size_t(num_kv_tokens * Hkv * D), 0.f);
  cpu::attention_backward<float>(
      shape, q_offsets, kv_offsets, size_t(num_seqs), widen(q, num_q_tokens * H * D).data(),
      widen(k, num_kv_tokens * Hkv * D).data(), widen(v, num_kv_tokens * Hkv * D).data(),
      widen(d_out, num_q_tokens * H * D).data(), DQ.data(), DK.data(), DV.data());
  narrow(DQ.data(), num_q_tokens * H * D, d_q);
  narrow(DK.data(), num_kv_tokens * Hkv * D, d_k);
  narrow(DV.data(), num_kv_tokens * Hkv * D, d_v);
}

// ---- Mixture of experts ----------------------------------------------------------------------

void Bf16Ops::route(const MoeShape& shape, int64_t rows, const float* logits, const int16_t* replay,
                    int16_t* experts, float* weights, int* bad_replays) {
  if (!cpu::route<float>(shape, rows, logits, replay, experts, weights)) {
    int bad = 0;
    for (int64_t i = 0; i < rows * shape.top_k; ++i) bad += replay[i] < 0 || replay[i] >= shape.num_experts;
    if (!bad_replays)
      throw std::invalid_argument("route: " + std::to_string(bad) + " replayed experts out of range");
    *bad_replays += bad;
  }
}
void Bf16Ops::route_backward(const MoeShape& shape, int64_t rows, const float* logits, const int16_t* experts,
                             const float* weights, const float* dweights, float* dlogits) {
  cpu::route_backward<float>(shape, rows, logits, experts, weights, dweights, dlogits);
}

namespace {
// The routed experts as backends/cuda/moe.cu computes them: the (row, slot) pairs grouped by
// expert, gate/up (bf16), SwiGLU (bf16) and the expert output (bf16) per pair.
struct ExpertPass {
  int64_t H, I, k;
  std::vector<std::vector<int64_t>> pairs;  // per expert: row * k + slot, in order
  F xe, gu, h, out;                         // per pair (indexed by row * k + slot), rounded to bf16
  F gate_up, down;                          // the weights, widened

  ExpertPass(const MoeShape& s, int64_t rows, const bf16* x, const int16_t* experts, const bf16* gu_w,
             const bf16* down_w)
      : H(s.hidden),
        I(s.intermediate),
        k(s.top_k),
        pairs(size_t(s.num_experts)),
        xe(size_t(rows * s.top_k * s.hidden)),
        gu(size_t(rows * s.top_k * 2 * s.intermediate)),
        h(size_t(rows * s.top_k * s.intermediate)),
        out(size_t(rows * s.top_k * s.hidden)),
        gate_up(widen(gu_w, s.num_experts * 2 * s.intermediate * s.hidden)),
        down(widen(down_w, s.num_experts * s.hidden * s.intermediate)) {
    for (int64_t p = 0; p < rows * k; ++p) {
      const int64_t e = experts[p];
      if (e < 0 || e >= s.num_experts)
        throw std::invalid_argument("experts: expert id " + std::to_string(e) + " out of range");
      pairs[size_t(e)].push_back(p);
      for (int64_t c = 0; c < H; ++c) xe[size_t(p * H + c)] = ref::to_float(x[(p / k) * H + c]);
    }
    for (size_t e = 0; e < pairs.size(); ++e) {
      const auto& P = pairs[e];
      const int64_t m = static_cast<int64_t>(P.size());
      if (m == 0) continue;
      F X = gather(xe, P, H), GU(size_t(m * 2 * I)), Hh(size_t(m * I)), O(size_t(m * H));
      cpu::linear_forward<float>(m, 2 * I, H, X.data(), gate_up.data() + e * 2 * I * H, GU.data());
      round_in_place(GU);
      cpu::swiglu_forward<float>(m, I, GU.data(), GU.data() + I, 2 * I, Hh.data());
      round_in_place(Hh);
      cpu::linear_forward<float>(m, H, I, Hh.data(), down.data() + e * H * I, O.data());
      round_in_place(O);
      scatter(GU, P, 2 * I, gu);
      scatter(Hh, P, I, h);
      scatter(O, P, H, out);
    }
  }
  static F gather(const F& all, const std::vector<int64_t>& P, int64_t width) {
    F out(P.size() * size_t(width));
    for (size_t i = 0; i < P.size(); ++i)
      std::copy_n(all.begin() + P[i] * width, width, out.begin() + int64_t(i) * width);
    return out;
  }
  static void scatter(const F& rows, const std::vector<int64_t>& P, int64_t width, F& all) {
    for (size_t i = 0; i < P.size(); ++i)
      std::copy_n(rows.begin() + int64_t(i) * width, width, all.begin() + P[i] * width);
  }
};
}  // namespace

void Bf16Ops::experts_forward(const MoeShape& shape, int64_t rows, const bf16* x, const int16_t* experts,
                              const float* weights, const bf16* gate_up, const bf16* down, bf16* y) {
  if (rows <= 0) return;
  const ExpertPass a(shape, rows, x, experts, gate_up, down);
  const int64_t H = shape.hidden, k = shape.top_k;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < H; ++c) {  // combine: each row's own slots in slot order
      float acc = ref::to_float(y[r * H + c]);
      for (int64_t s = 0; s < k; ++s) acc += weights[r * k + s] * a.out[size_t((r * k + s) * H + c)];
      y[r * H + c] = ref::to_bf16(acc);
    }
}

void Bf16Ops::experts_backward(const MoeShape& shape, int64_t rows, const bf16* x, const int16_t* experts,
                               const float* weights, const bf16* gate_up, const bf16* down, const bf16* dy,
                               bf16* dx, bool accumulate_dx, float* dweights, float* dgate_up, float* ddown) {
  if (rows <= 0) return;
  const ExpertPass a(shape, rows, x, experts, gate_up, down);
  const int64_t H = shape.hidden, I = shape.intermediate, k = shape.top_k, n = rows * k;
  F dye(size_t(n * H)), dxe(size_t(n * H));
  for (int64_t p = 0; p < n; ++p) {  // dweights = <dy, out>, dye = w · dy
    float dot = 0.f;
    for (int64_t c = 0; c < H; ++c) {
      const float d = ref::to_float(dy[(p / k) * H + c]);
      dot += d * a.out[size_t(p * H + c)];
      dye[size_t(p * H + c)] = round_bf16(weights[p] * d);
    }
    dweights[p] = dot;
  }
  for (size_t e = 0; e < a.pairs.size(); ++e) {
    const auto& P = a.pairs[e];
    const int64_t m = static_cast<int64_t>(P.size());
    if (m == 0) continue;
    const F DYE = ExpertPass::gather(dye, P, H), Hh = ExpertPass::gather(a.h, P, I),
            GU = ExpertPass::gather(a.gu, P, 2 * I), XE = ExpertPass::gather(a.xe, P, H);
    F DH(size_t(m * I), 0.f), DGU(size_t(m * 2 * I), 0.f), DXE(size_t(m * H), 0.f);
    cpu::linear_backward_input<float>(m, H, I, DYE.data(), a.down.data() + e * H * I, DH.data(), false);
    round_in_place(DH);
    if (ddown) cpu::linear_backward_weight<float>(m, H, I, DYE.data(), Hh.data(), ddown + e * H * I);
    cpu::swiglu_backward<float>(m, I, GU.data(), GU.data() + I, 2 * I, DH.data(), DGU.data(), DGU.data() + I,
                                2 * I);
    round_in_place(DGU);
    cpu::linear_backward_input<float>(m, 2 * I, H, DGU.data(), a.gate_up.data() + e * 2 * I * H, DXE.data(),
                                      false);
    round_in_place(DXE);
    if (dgate_up)
      cpu::linear_backward_weight<float>(m, 2 * I, H, DGU.data(), XE.data(), dgate_up + e * 2 * I * H);
    ExpertPass::scatter(DXE, P, H, dxe);
  }
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < H; ++c) {
      float acc = accumulate_dx ? ref::to_float(dx[r * H + c]) : 0.f;
      for (int64_t s = 0; s < k; ++s) acc += dxe[size_t((r * k + s) * H + c)];
      dx[r * H + c] = ref::to_bf16(acc);
    }
}

// ---- The trainer's head, loss and optimizer (backends/cuda/head.cu, optimizer.cu) ---------------

void Bf16Ops::token_logprobs(int64_t rows, int64_t V, int64_t valid, const float* logits,
                             const int32_t* targets, float* logprob, float* lse) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* l = logits + r * V;
    float mx = -INFINITY;
    for (int64_t i = 0; i < valid; ++i) mx = std::max(mx, l[i]);
    float sum = 0.f;
    for (int64_t i = 0; i < valid; ++i) sum += std::exp(l[i] - mx);
    lse[r] = mx + std::log(sum);
    logprob[r] = targets[r] >= 0 && targets[r] < valid ? l[targets[r]] - lse[r] : -INFINITY;
  }
}
void Bf16Ops::token_logprobs_backward(int64_t rows, int64_t V, int64_t valid, const float* logits,
                                      const float* lse, const int32_t* targets, const float* coef,
                                      bf16* dlogits) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < V; ++i) {
      float d = 0.f;
      if (coef[r] != 0.f && i < valid)
        d = coef[r] * (float(i == targets[r]) - std::exp(logits[r * V + i] - lse[r]));
      dlogits[r * V + i] = ref::to_bf16(d);
    }
}
void Bf16Ops::vocab_logprob_stats(int64_t rows, int64_t V, int64_t valid, const float* logits,
                                  const int32_t* targets, float* stats) {
  for (int64_t r = 0; r < rows; ++r) {  // token_logprobs' max and sum, over this rank's real ids
    const float* l = logits + r * V;
    float mx = -INFINITY;
    for (int64_t i = 0; i < valid; ++i) mx = std::max(mx, l[i]);
    float sum = 0.f;
    for (int64_t i = 0; i < valid; ++i) sum += std::exp(l[i] - mx);
    const bool holds = targets[r] >= 0 && targets[r] < V;
    float* s = stats + r * 4;
    s[0] = mx, s[1] = sum, s[2] = holds ? l[targets[r]] : 0.f, s[3] = holds ? 1.f : 0.f;
  }
}
void Bf16Ops::vocab_logprob_combine(int64_t rows, int64_t parts, const float* stats, float* logprob,
                                    float* lse) {
  for (int64_t r = 0; r < rows; ++r) {
    double mx = -INFINITY, z = 0, target = NAN;
    for (int64_t p = 0; p < parts; ++p) mx = std::max(mx, double(stats[(p * rows + r) * 4]));
    for (int64_t p = 0; p < parts; ++p) {
      const float* s = stats + (p * rows + r) * 4;
      if (s[0] > -INFINITY) z += double(s[1]) * std::exp(double(s[0]) - mx);
      if (s[3] != 0.f) target = s[2];
    }
    lse[r] = float(mx + std::log(z));
    logprob[r] = float(target - mx - std::log(z));
  }
}
void Bf16Ops::grpo_token_loss(int64_t n, const float* pw, const float* lt, const float* lp, bool clip,
                              double lo, double hi, float* loss, float* coef) {
  for (int64_t i = 0; i < n; ++i) {
    const float w = pw[i];
    if (w == 0.f) {
      loss[i] = 0.f, coef[i] = 0.f;
      continue;
    }
    const float r = std::exp(lt[i] - lp[i]);
    if (!clip) {
      loss[i] = -w * r, coef[i] = -w * r;
      continue;
    }
    const float rc = std::min(std::max(r, 1.f - float(lo)), 1.f + float(hi));
    const float unclipped = w * r, clipped = w * rc;
    if (unclipped <= clipped)
      loss[i] = -unclipped, coef[i] = -w * r;
    else
      loss[i] = -clipped, coef[i] = 0.f;
  }
}
void Bf16Ops::sample_tokens(int64_t rows, int64_t V, int64_t valid, const float* logits,
                            const SamplingRow* params, int32_t* tokens, float* logprob) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* l = logits + r * V;
    if (!std::all_of(l, l + valid, [](float x) { return std::isfinite(x); })) {
      tokens[r] = -1, logprob[r] = NAN;
      continue;
    }
    const SamplingRow& p = params[r];
    const SampledToken t =
        sample_token(l, valid, SamplingParams{p.temperature, p.top_p, 0, p.seed}, p.counter);
    tokens[r] = t.token, logprob[r] = t.logprob;
  }
}
void Bf16Ops::sum_squares(int64_t n, const float* g, double* sum_sq) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += double(g[i]) * g[i];
  *sum_sq += s;
}
void Bf16Ops::adamw_update(int64_t n, const AdamWStep& s, const float* grad, float* p, float* m, float* v,
                           bf16* working) {
  const float c1 = float(1.0 - std::pow(s.beta1, double(s.step))),
              c2 = float(1.0 - std::pow(s.beta2, double(s.step)));
  const float lr = float(s.lr), b1 = float(s.beta1), b2 = float(s.beta2), eps = float(s.eps),
              wd = float(s.weight_decay);
  for (int64_t i = 0; i < n; ++i) {
    const float gr = grad[i] * float(s.grad_scale);
    const float mi = b1 * m[i] + (1.f - b1) * gr, vi = b2 * v[i] + (1.f - b2) * gr * gr;
    m[i] = mi, v[i] = vi;
    p[i] = p[i] - lr * ((mi / c1) / (std::sqrt(vi / c2) + eps) + wd * p[i]);
    if (working) working[i] = ref::to_bf16(p[i]);
  }
}

}  // namespace mlpt::ref::cpu
