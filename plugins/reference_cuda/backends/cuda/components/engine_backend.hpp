// The reference engine's CUDA backend (engine/backend.hpp) and the component "qwen35_cuda":
// bf16 weights on one GPU (alone, or its shard in a model-parallel group), per sequence a
// fixed-size GDN state and conv windows on the device (allocated at its first step) and KV blocks
// lent by one pool (a copy of a sequence, as the prefix cache and sessions make, shares the blocks
// it has filled), one step = generate_step (backends/cuda/generate.hpp). Sampling with temperature
// and top-p runs on the device; a request with top-k > 0 gets its row's logits on the host and the
// CPU sampler (model/sampling.hpp).
//
// Weights: loaded from the checkpoint at start; an engine alone loads named tensors in CPU memory
// (F32/BF16/F16) or in CUDA memory (F32, e.g. the qwen35_cuda trainer's export through the
// in-process transport: copied device to device, any GPU).
//
// Settings, besides the engine's (engine/engine.hpp): device (CUDA ordinal, 0), kv_cache_bytes
// (the KV pool, 1 GiB; a step that finds it exhausted fails its requests with
// MLPT_RESOURCE_EXHAUSTED), kv_block_size (tokens per KV block, 16); and the engine group's
// (engine/group_backend.hpp): tensor_parallel, expert_parallel (1, 1) make the engine one rank of
// an engine group (engine.h, Engine groups) of tensor_parallel × expert_parallel ranks.
//
// In a group (the protocol: engine/group_backend.hpp) each rank holds its shard of the checkpoint
// on its GPU (model/parallel/shard_weights.hpp) and a KV pool of kv_cache_bytes for its KV heads;
// the model's tensor-parallel sums run on a device communicator made from the group's one
// (backends/cuda/parallel/device_communicator.hpp: NCCL where every rank has a GPU of its own,
// else staged through the host over MPI, so that ranks may share a GPU), its routed experts'
// rows go over the group's expert communicator (MPI, host-staged dispatch: model.hpp). Rank 0
// samples. A group's loads take host memory only (its shard boxes or whole tensors, as
// float32/bf16/f16). A rank that fails halfway through a step is heard by the others through the
// MPI communicators' waits; NCCL's collectives cannot be abandoned this way, so over NCCL the
// other ranks may wait for it.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "backends/cuda/generate.hpp"
#include "backends/cuda/parallel/device_communicator.hpp"
#include "engine/engine.hpp"
#include "engine/group_backend.hpp"
#include "mlpt/sdk/settings.hpp"

namespace mlpt::ref::cuda {

class CudaEngineBackend final : public GroupBackend {
 public:
  CudaEngineBackend(sdk::Settings& settings, const std::string& checkpoint, bool chunked_prefill,
                    const mlpt_component_group* group);
  ~CudaEngineBackend() override;

  const ModelConfig& config() const override { return config_; }
  void load_weights(const mlpt_named_tensor* tensors, size_t count, const mlpt_device_ready& ready) override;

  int64_t free_kv_blocks() const { return pool_->free_blocks(); }

 private:
  class State;
  std::unique_ptr<SequenceState> new_shard_state() override;
  void run_step(const std::vector<StepSegment>& segments, int64_t valid, bool record_routing, StepOutput& out,
                const GroupForward& together) override;
  std::function<void()> prepare_weights(Weights<float> weights) override;
  std::unique_ptr<SequenceState> clone(const State& from);

  int device_ = 0;
  bool chunked_prefill_ = true;
  ModelConfig config_;  // the whole model's (weights_.config is this rank's part)
  Context ctx_;
  DeviceWeights weights_;
  std::unique_ptr<KvBlockPool> pool_;
  WorkspacePtr ws_;
  StepScratch scratch_;
  DeviceCommunicator tensor_;  // under tensor parallelism: its sums on the device
  ModelParallel parallel_;     // in a group: the model's groups
  // One step, clone or load at a time (they share ctx_ and the workspace). A step holds it while
  // it runs with the group, a load takes it inside the group's agreement: the engine never runs
  // both at once (it loads paused), so the two orders never meet.
  std::mutex mutex_;
};

// The component: the reference engine on this backend.
class CudaEngine final : public ReferenceEngine {
 public:
  explicit CudaEngine(std::string_view config_json, const mlpt_component_group* group = nullptr);
};

}  // namespace mlpt::ref::cuda
