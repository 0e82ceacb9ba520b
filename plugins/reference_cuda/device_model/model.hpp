// The Qwen3.5 MoE text model as the backends run it (model/ is its fp32 definition), written once
// over the ops interface (ops/ops.hpp): forward of a packed batch (training, prefill, decode with
// per-sequence state) and the backward with per-layer recomputation. The CUDA backend runs it with
// its kernels (backends/cuda/cuda_ops.hpp), the CPU with bf16 storage emulated
// (backends/cpu/bf16_ops.hpp), so the CPU tests run the code the GPU runs and the CPU's result is
// the GPU's oracle to fp32 summation order. model/model.hpp is the independent fp32/fp64
// reference, the definition of the architecture, which this model is tested against.
//
// Weights: bf16 working copies of the matrices, fp32 for the small tensors (norm weights, conv,
// A_log, dt_bias: Init other than normal); gradients fp32 for every tensor. Activations bf16.
//
// Tensor parallelism (model/parallel/model_parallel.hpp): weights of a shard's config (heads, FFN
// columns split; shard_weights) and the batch's ModelParallel::tensor group, whose buffers are the
// backend's memory; the mixer and MoE outputs, and in the backward the input gradients and the
// per-head norms' gradients, are partial sums summed over the group where model/model.cpp sums
// them, widened to fp32 for the sum and rounded back to bf16. The embedding and LM head are split
// by token ids (ModelShard::vocab_parallel): a rank looks up its range's ids, zero rows for the
// others', and the TP sum completes the rows exactly; the LM head and its log-softmax over the
// ranges are device_model/vocab_head.hpp's.
//
// Expert parallelism (ModelParallel::expert, a host-memory communicator such as MPI's): each MoE
// layer's routed experts go through a host-staged dispatch (device_model/staged_experts.hpp).
//
// Pipeline parallelism (ModelParallel::pipeline, a group in the backend's memory): a stage's shard
// holds its layers' tensors as model/parallel/pipeline_stages.hpp cuts them (the cut the fp32 model,
// the trainer's state files and the memory plan use); the residual stream [N, H] and, in the
// backward, its gradient pass to the next (previous) stage point to point, widened to fp32 on the
// way (exact: the next stage gets the same bf16 bits). The model sends and receives them itself,
// or leaves them to the caller (DeviceBatch::boundary: the trainer's 1F1B schedule).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "model/parallel/stage_boundary.hpp"
#include "model/weights.hpp"
#include "ops/ops.hpp"

namespace mlpt::ref::dev {

// Whether layout tensor i is kept in fp32 (else bf16).
bool is_fp32_tensor(const ModelLayout& layout, int i);

struct DeviceWeights {
  ModelConfig config;
  ModelLayout layout;
  std::vector<Buffer> tensors;  // one per layout tensor, bf16 or fp32 (is_fp32_tensor)
  const bf16* bf(int i) const { return tensors[i].as<bf16>(); }
  const float* f(int i) const { return tensors[i].as<float>(); }
};

// Memory for every tensor of `layout` (the model's, or a shard's: shard_weights gives a shard's
// expert tensors E/ep experts while its config counts all E), uninitialised.
DeviceWeights allocate_weights(Ops& ops, const ModelConfig& c, const ModelLayout& layout);
// Every tensor i of `w` into tensors[i] (converted to bf16 where kept so), in w's own layout.
// Synchronous.
DeviceWeights upload_weights(Ops& ops, const Weights<float>& w);
// Overwrites tensor i from its numel fp32 values in the backend's memory (master weights). With
// `changed` (device words, ceil(numel / 32) of them) also ORs in a bit per element whose stored bits
// changed (Ops::to_bf16_marking): what a refit of the working weights must send.
void assign_tensor(Ops& ops, DeviceWeights& w, int i, const float* device_fp32, uint32_t* changed = nullptr);
// Tensor i as fp32 on the host. Synchronous.
std::vector<float> download_tensor(Ops& ops, const DeviceWeights& w, int i);

// A sequence's generation state (§4): per GDN layer the conv window ([K−1, C] bf16) and the
// recurrent state ([Hv, dk, dv] fp32); its attention keys and values live in a KvCache's blocks,
// listed here (one table for all attention layers: positions are shared).
struct DeviceSequenceState {
  std::vector<Buffer> conv, state;  // per layer, empty for attention layers
  std::vector<int32_t> blocks;      // KV blocks in position order
  int64_t length = 0;               // tokens consumed
  DeviceSequenceState(Ops& ops, const ModelConfig& c);
  // A copy of `other`'s GDN state and windows (blocks NOT copied: the caller shares or copies them).
  void copy_recurrent_from(Ops& ops, const DeviceSequenceState& other);
};

// The paged KV pools of every attention layer: [num_blocks, block_size, Hkv, D] bf16 for k and v.
struct KvCache {
  int64_t block_size = 0, num_blocks = 0;
  std::vector<Buffer> k, v;  // per layer, empty for GDN layers
  KvCache(Ops& ops, const ModelConfig& c, int64_t num_blocks, int64_t block_size);
  static size_t bytes_per_block(const ModelConfig& c, int64_t block_size);
  size_t bytes_per_block(const ModelConfig& c) const { return bytes_per_block(c, block_size); }
};

// A pipeline stage's boundary messages left to the caller (model/parallel/stage_boundary.hpp), in
// the backend's memory: the bf16 values widened exactly, as the model's own messages carry them.
using StageBoundary = ref::StageBoundary;

struct DeviceBatch {
  std::vector<int32_t> tokens;               // host, [N]
  std::vector<int64_t> offsets{0};           // host, segments
  std::vector<DeviceSequenceState*> states;  // empty, or one per segment (then none NULL)
  KvCache* kv = nullptr;                     // required when states are given; blocks already reserved
  bool chunked = true;                       // GDN form for segments longer than one token
  const int16_t* replay_experts = nullptr;   // host [N, layers, k] (R3) or NULL
  int16_t* routed_experts = nullptr;         // host out [N, layers, k] or NULL
  const ModelParallel* parallel = nullptr;   // a shard's groups (expert: host memory), NULL for one rank
  const StageBoundary* boundary = nullptr;   // NULL: the model exchanges with the neighbouring stages
  int64_t table_width = 0;  // the block table's row length at least (recorded steps keep it fixed)
  int64_t num_tokens() const { return offsets.back(); }
  size_t num_segments() const { return offsets.size() - 1; }
};

// What a forward puts on the device besides the tokens, computed on the host (and tested there):
// each token's position, and with states the block table and each segment's KV length after the step.
struct BatchPlan {
  std::vector<int64_t> positions;  // [N]
  bool has_states = false;
  int64_t max_blocks = 0;
  std::vector<int32_t> block_table;  // [S, max_blocks], unused entries 0
  std::vector<int64_t> kv_lengths;   // [S]
};
// Validates the batch against the config (throws naming the segment, token or expert) and plans it.
BatchPlan plan_batch(const ModelConfig& c, const DeviceBatch& b);

// Working memory of forward / backward, reused across calls (grows as needed).
struct Workspace;
struct WorkspaceDeleter {
  void operator()(Workspace*) const;
};
using WorkspacePtr = std::unique_ptr<Workspace, WorkspaceDeleter>;
WorkspacePtr make_workspace();

// Per-layer taps for tests and diagnostics: after each layer, the residual stream [N, H] bf16 of
// the layer's output is copied to the host here when set ((L + 1) x N x H, entry 0 the embedding).
struct LayerTrace {
  std::vector<float> residual;
};

// hidden [N, H] bf16 (after the final norm) into `hidden` (resized). States advance. With
// `layer_inputs` the residual stream entering every layer and leaving the last is kept
// ((L + 1) x N x H bf16) for backward. Throws naming the token on bad ids / replayed experts.
// A pipeline stage runs its layers only: a later stage first receives the residual stream from the
// previous one, a stage before the last sends its output to the next and leaves `hidden` as it was;
// its `layer_inputs` are its own layers' (count + 1) x N x H, its routing record holds its layers'
// experts (0 at the others'). Every stage makes the same calls in the same order (blocking messages);
// with batch.boundary the input and output are the caller's to pass instead.
void forward_hidden(Ops& ops, const DeviceWeights& w, const DeviceBatch& batch, Workspace& ws, Buffer& hidden,
                    Buffer* layer_inputs, LayerTrace* trace = nullptr);

// Backward of a state-free forward given d(hidden) [N, H] bf16: accumulates fp32 gradients into
// grads[i] (numel floats each) for every tensor except the LM head. `experts` is the forward's
// routing record (host [N, L, k]). A pipeline stage before the last receives d(its output) from the
// next stage instead of reading d_hidden (which may be NULL there); a stage after the first sends
// d(its input) to the previous one (with batch.boundary: read from and left in it, for the caller).
void backward(Ops& ops, const DeviceWeights& w, const DeviceBatch& batch, const Buffer& layer_inputs,
              const int16_t* experts, const bf16* d_hidden, std::vector<Buffer>& grads, bool router_grad,
              Workspace& ws);

// forward_hidden in two halves, for recording the second (device_model/decode_graphs.hpp), one rank:
// first the host's work (checks, plan, and every upload: tokens, offsets, positions, block table,
// KV lengths, the states' pointers), then `staged()` (e.g. begin recording), then the device's work,
// which reads only what was staged: no upload, no copy to the host, no synchronisation. Lengths do
// not advance; the routing record (batch.routed_experts set) stays in the workspace. A second batch
// of the same shape (tokens, segments, table_width) stages into the same addresses, so work recorded
// for the first computes the second. With `hidden` NULL only the host's half runs (stage_forward).
void forward_staged(Ops& ops, const DeviceWeights& w, const DeviceBatch& batch, Workspace& ws, Buffer* hidden,
                    const std::function<void()>& staged);
void stage_forward(Ops& ops, const DeviceWeights& w, const DeviceBatch& batch, Workspace& ws);
// The last forward's routing record on the device, [N, layers, k] int16.
const int16_t* routing_record(const Workspace& ws);

}  // namespace mlpt::ref::dev
