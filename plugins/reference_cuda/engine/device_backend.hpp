// The reference engine's backend on the device model (engine/backend.hpp), for any DevicePlatform:
// bf16 weights (alone, or this rank's shard in a model-parallel group), per sequence a fixed-size
// GDN state and conv windows (allocated at its first step) and KV blocks lent by one pool (a copy
// of a sequence, as the prefix cache and sessions make, shares the blocks it has filled), one step =
// generate_step (device_model/generate.hpp). Sampling with temperature and top-p runs through the
// ops; a request with top-k > 0 gets its row's logits on the host and the CPU sampler
// (model/sampling.hpp). The "qwen35_cuda" engine is this backend on a GPU
// (backends/cuda/components/engine_backend.hpp); "qwen35_bf16" is it on the host platform.
//
// Weights: loaded from the checkpoint at start; an engine alone loads named tensors in host memory
// (F32/BF16/F16) or, F32, in memory its platform reads directly (the GPU trainer's CUDA exports
// through the in-process transport: copied device to device).
//
// Settings, besides the engine's (engine/engine.hpp) and the platform's: kv_cache_bytes (the KV
// pool, 1 GiB; a step that finds it exhausted fails its requests with MLPT_RESOURCE_EXHAUSTED),
// kv_block_size (tokens per KV block, 16); and the engine group's (engine/group_backend.hpp):
// tensor_parallel, expert_parallel (1, 1) make the engine one rank of an engine group (engine.h,
// Engine groups) of tensor_parallel × expert_parallel ranks.
//
// On a platform that records decode steps (cuda_graphs = "decode"), an engine alone runs every
// step of one-token segments (up to kAllExpertsMaxRows sequences) as a replayed recording
// (device_model/decode_graphs.hpp); other steps, and every step of a group, run unrecorded.
//
// In a group each rank holds its shard of the checkpoint (model/parallel/shard_weights.hpp) and a
// KV pool of kv_cache_bytes for its KV heads; the model's tensor-parallel sums run on the
// platform's device group made from the group's one, its routed experts' rows go over the group's
// expert communicator (MPI, host-staged dispatch). Rank 0 samples. A group's loads take host memory
// only (its shard boxes or whole tensors, as float32/bf16/f16).
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "device_model/decode_graphs.hpp"
#include "device_model/generate.hpp"
#include "device_model/platform.hpp"
#include "engine/group_backend.hpp"
#include "mlpt/sdk/settings.hpp"

namespace mlpt::ref {

class DeviceEngineBackend final : public GroupBackend {
 public:
  // `component` names it in logs ("engine qwen35_cuda"); `make_platform` is called after the
  // settings (the platform's own keys read by `platform_keys`) are read.
  DeviceEngineBackend(sdk::Settings& settings, const std::string& checkpoint, bool chunked_prefill,
                      const mlpt_component_group* group, const std::string& component,
                      const std::function<void(sdk::Settings&)>& platform_keys,
                      const std::function<std::unique_ptr<DevicePlatform>()>& make_platform);
  ~DeviceEngineBackend() override;

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
  Ops& ops() { return platform_->ops(); }

  std::string component_;
  bool chunked_prefill_ = true;
  ModelConfig config_;                        // the whole model's (weights_.config is this rank's part)
  std::unique_ptr<DevicePlatform> platform_;  // first made, last gone: every buffer below is its memory
  dev::DeviceWeights weights_;
  std::unique_ptr<dev::KvBlockPool> pool_;
  dev::WorkspacePtr ws_;
  dev::StepScratch scratch_;
  // Decode steps recorded per batch bucket (platform's decode_graphs(), an engine alone). Its
  // recordings stay valid while the weights keep their buffers: a load reallocates them, so the
  // next step of each bucket records it again (device_model/graph_buckets.hpp).
  std::unique_ptr<dev::DecodeGraphs> graphs_;
  std::unique_ptr<Communicator> tensor_;  // under tensor parallelism: its sums on the device
  ModelParallel parallel_;                // in a group: the model's groups
  // One step, clone or load at a time (they share the platform and the workspace). A step holds it
  // while it runs with the group, a load takes it inside the group's agreement: the engine never
  // runs both at once (it loads paused), so the two orders never meet.
  std::mutex mutex_;
};

}  // namespace mlpt::ref
