// The reference engine's CUDA backend (engine/backend.hpp) and the component "qwen35_cuda":
// bf16 weights on one GPU, per sequence a fixed-size GDN state and conv windows on the device
// (allocated at its first step) and KV blocks lent by one pool (a copy of a sequence, as the
// prefix cache and sessions make, shares the blocks it has filled), one step = generate_step
// (backends/cuda/generate.hpp). Sampling with temperature and top-p runs on the device; a request
// with top-k > 0 gets its row's logits on the host and the CPU sampler (model/sampling.hpp).
//
// Weights: loaded from the checkpoint at start; load_weights takes named tensors in CPU memory
// (F32/BF16/F16) or in CUDA memory (F32, e.g. the qwen35_cuda trainer's export through the
// in-process transport: copied device to device, any GPU).
//
// Settings, besides the engine's (engine/engine.hpp): device (CUDA ordinal, 0), kv_cache_bytes
// (the KV pool, 1 GiB; a step that finds it exhausted fails its requests with
// MLPT_RESOURCE_EXHAUSTED), kv_block_size (tokens per KV block, 16). tensor_parallel and
// expert_parallel are accepted at 1 only: the CUDA engine is not model-parallel yet.
#pragma once

#include <memory>
#include <mutex>
#include <string>

#include "backends/cuda/generate.hpp"
#include "engine/backend.hpp"
#include "engine/engine.hpp"
#include "mlpt/sdk/settings.hpp"

namespace mlpt::ref::cuda {

class CudaEngineBackend final : public EngineBackend {
 public:
  CudaEngineBackend(sdk::Settings& settings, const std::string& checkpoint, bool chunked_prefill);
  ~CudaEngineBackend() override;

  const ModelConfig& config() const override { return weights_.config; }
  std::unique_ptr<SequenceState> new_state() override;
  void load_weights(const mlpt_named_tensor* tensors, size_t count, const mlpt_device_ready& ready) override;
  void step(const std::vector<StepSegment>& segments, int64_t valid, bool record_routing, StepOutput& out) override;

  int64_t free_kv_blocks() const { return pool_->free_blocks(); }

 private:
  class State;
  std::unique_ptr<SequenceState> clone(const State& from);

  int device_ = 0;
  bool chunked_prefill_ = true;
  Context ctx_;
  DeviceWeights weights_;
  std::unique_ptr<KvBlockPool> pool_;
  WorkspacePtr ws_;
  StepScratch scratch_;
  std::mutex mutex_;  // one step or load at a time (they share ctx_ and the workspace)
};

// The component: the reference engine on this backend.
class CudaEngine final : public ReferenceEngine {
 public:
  explicit CudaEngine(std::string_view config_json);
};

}  // namespace mlpt::ref::cuda
