// The Qwen3.5 MoE text model on the device (qwen35-architecture.md §2-§4), composed from this
// folder's ops as model/model.cpp composes the CPU ones: forward of a packed batch (training,
// prefill, decode with per-sequence device state) and the backward with per-layer recomputation.
// Weights: bf16 working copies of the matrices, fp32 for the small tensors (norm weights, conv,
// A_log, dt_bias: Init other than normal); gradients fp32 for every tensor.
//
// Tensor parallelism (model/parallel/model_parallel.hpp): DeviceWeights of a shard's config (heads,
// FFN columns split; shard_weights) and the batch's ModelParallel::tensor group; the mixer and MoE
// outputs, and in the backward the input gradients and the per-head norms' gradients, are partial
// sums summed over the group where the CPU model sums them, widened to fp32 for the sum (the
// precision the communicators carry) and rounded back to bf16. The group's buffers are device
// memory ordered on ctx.stream: an NcclCommunicator made with ctx.stream, or a StagedCommunicator
// over MPI (backends/cuda/parallel/host_staging.hpp).
//
// Expert parallelism (ModelParallel::expert, a host-memory communicator such as MPI's, unlike the
// tensor group): each MoE layer's routed experts go through a host-staged dispatch
// (backends/cuda/parallel/staged_expert_dispatch.hpp; device all-to-all kernels are future work);
// the shard's expert tensors hold its block of experts. Everything else is computed alike on every
// rank of the expert group.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "backends/cuda/context.hpp"
#include "model/weights.hpp"

namespace mlpt::ref::cuda {

// Whether layout tensor i is kept in fp32 on the device (else bf16).
bool is_fp32_tensor(const ModelLayout& layout, int i);

struct DeviceWeights {
  ModelConfig config;
  ModelLayout layout;
  std::vector<DeviceBuffer> tensors;  // one per layout tensor, bf16 or fp32 (is_fp32_tensor)
  const bf16* bf(int i) const { return tensors[i].as<bf16>(); }
  const float* f(int i) const { return tensors[i].as<float>(); }
};

// Device memory for every tensor of `c`'s layout, uninitialised.
DeviceWeights allocate_weights(const ModelConfig& c);
// Uploads (converting to bf16 where the device keeps bf16). Synchronous.
DeviceWeights upload_weights(const Context& ctx, const Weights<float>& w);
// Overwrites tensor i from n fp32 values on the device (master weights), converting as needed.
void assign_tensor(const Context& ctx, DeviceWeights& w, int i, const float* device_fp32);
// Tensor i as fp32 on the host. Synchronous.
std::vector<float> download_tensor(const Context& ctx, const DeviceWeights& w, int i);

// A sequence's generation state on the device (§4): per GDN layer the conv window ([K−1, C] bf16)
// and the recurrent state ([Hv, dk, dv] fp32); its attention keys and values live in a KvCache's
// blocks, listed here (one table for all attention layers: positions are shared).
struct DeviceSequenceState {
  std::vector<DeviceBuffer> conv, state;  // per layer, empty for attention layers
  std::vector<int32_t> blocks;            // KV blocks in position order
  int64_t length = 0;                     // tokens consumed
  DeviceSequenceState(const Context& ctx, const ModelConfig& c);
  // A copy of `other` (GDN state and windows copied on the device; blocks NOT copied, the caller
  // shares or copies them through the KvCache).
  void copy_recurrent_from(const Context& ctx, const DeviceSequenceState& other);
};

// The paged KV pools of every attention layer: [num_blocks, block_size, Hkv, D] bf16 for k and v.
struct KvCache {
  int64_t block_size = 0, num_blocks = 0;
  std::vector<DeviceBuffer> k, v;  // per layer, empty for GDN layers
  KvCache(const ModelConfig& c, int64_t num_blocks, int64_t block_size);
  size_t bytes_per_block(const ModelConfig& c) const;
};

struct DeviceBatch {
  std::vector<int32_t> tokens;        // host, [N]
  std::vector<int64_t> offsets{0};    // host, segments
  std::vector<DeviceSequenceState*> states;  // empty, or one per segment (NULL = fresh, no state)
  KvCache* kv = nullptr;              // required when any state is given; blocks already reserved
  bool chunked = true;                // GDN form for segments longer than one token
  const int16_t* replay_experts = nullptr;  // host [N, layers, k] (R3) or NULL
  int16_t* routed_experts = nullptr;        // host out [N, layers, k] or NULL
  const ModelParallel* parallel = nullptr;  // a shard's groups (expert: host memory), NULL for one rank
  int64_t num_tokens() const { return offsets.back(); }
  size_t num_segments() const { return offsets.size() - 1; }
};

// Working memory of forward / backward, reused across calls (grows as needed).
struct Workspace;
struct WorkspaceDeleter { void operator()(Workspace*) const; };
using WorkspacePtr = std::unique_ptr<Workspace, WorkspaceDeleter>;
WorkspacePtr make_workspace();

// hidden [N, H] bf16 (after the final norm) into `hidden` (device, resized). States advance.
// With `layer_inputs` the residual stream entering every layer and leaving the last is kept
// ((L + 1) x N x H bf16) for backward. Throws naming the token on bad ids / replayed experts.
void forward_hidden(const Context& ctx, const DeviceWeights& w, const DeviceBatch& batch, Workspace& ws,
                    DeviceBuffer& hidden, DeviceBuffer* layer_inputs);

// Backward of a cache-free forward given d(hidden) [N, H] bf16: accumulates fp32 gradients into
// grads[i] (device, numel floats each) for every tensor except the LM head. `experts` is the
// forward's routing record (host [N, L, k]).
void backward(const Context& ctx, const DeviceWeights& w, const DeviceBatch& batch, const DeviceBuffer& layer_inputs,
              const int16_t* experts, const bf16* d_hidden, std::vector<DeviceBuffer>& grads, bool router_grad,
              Workspace& ws);

}  // namespace mlpt::ref::cuda
