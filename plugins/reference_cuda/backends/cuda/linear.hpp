// Bias-free linear layers through cuBLAS or cuBLASLt (gemm.hpp; BF16 inputs, FP32 accumulation), weights in
// PyTorch's [out, in] layout, row-major activations: the CUDA counterpart of ../cpu/linear.hpp; and the
// grouped form the routed experts use (one GEMM per expert, sizes known on the host).
#pragma once

#include <vector>

#include "backends/cuda/context.hpp"
#include "device_model/backend_options.hpp"

namespace mlpt::ref::cuda {

// y[M,N] (+)= x[M,K] · W[N,K]^T
void linear_forward(const Context& ctx, int64_t M, int64_t N, int64_t K, const bf16* x, const bf16* W,
                    bf16* y, bool accumulate = false);
// dx[M,K] (+)= dy[M,N] · W[N,K]
void linear_backward_input(const Context& ctx, int64_t M, int64_t N, int64_t K, const bf16* dy, const bf16* W,
                           bf16* dx, bool accumulate);
// dW[N,K] += dy[M,N]^T · x[M,K], dW in fp32.
void linear_backward_weight(const Context& ctx, int64_t M, int64_t N, int64_t K, const bf16* dy,
                            const bf16* x, float* dW);

// y[M,N] = x[M,K] · W[N,K]^T with fp32 output (the router and the LM head's logits).
void linear_forward_fp32(const Context& ctx, int64_t M, int64_t N, int64_t K, const bf16* x, const bf16* W,
                         float* y);

// One member of a grouped product, in the terms of the three calls above (M rows of activations).
struct LinearGroup {
  int64_t M, N, K;
  const bf16* a;  // x (forward, weight), dy (input)
  const bf16* W;  // weight (forward, input); for backward_weight: the activations x
  void* out;      // bf16 y / dx, or fp32 dW
};
enum class LinearKind { forward, backward_input, backward_weight };

// Runs every group (M == 0 groups are skipped) as one cublasGemmGroupedBatchedEx (the context's
// options: ExpertGemm::grouped; also one product per group where cuBLAS does not support the
// grouped call for these types) or one product per group through the context's GEMM library
// (ExpertGemm::per_expert). Outputs are overwritten (forward, backward_input) or accumulated
// (backward_weight). Asynchronous: no synchronisation, no allocation once the pointer array fits.
void linear_grouped(const Context& ctx, LinearKind kind, const std::vector<LinearGroup>& groups);

// The products of routed experts sized on the device (ExpertForm per_slot and all_experts), through
// cuBLAS's batched calls (no grouped call takes device-side sizes):
// y_i[N] = x_i[K] · W_iᵀ for i < count, every pointer read from device arrays.
void linear_forward_gathered(const Context& ctx, int64_t count, int64_t N, int64_t K, const bf16* const* x,
                             const bf16* const* W, bf16* const* y);
// y_b[M, N] = x_b[M, K] · W_bᵀ for b < batch, operands `stride` elements apart (x_stride 0: one x for all).
void linear_forward_strided(const Context& ctx, int64_t batch, int64_t M, int64_t N, int64_t K, const bf16* x,
                            int64_t x_stride, const bf16* W, int64_t W_stride, bf16* y, int64_t y_stride);
// The form experts_forward takes for `rows` under the context's options (choose_expert_form).
ExpertForm expert_form(const Context& ctx, int64_t rows, int64_t top_k, int64_t num_experts);

}  // namespace mlpt::ref::cuda
