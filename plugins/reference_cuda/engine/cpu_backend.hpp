// The reference engine's CPU backend (engine/backend.hpp) and the component "qwen35_cpu": fp32
// weights in host memory, per sequence a SequenceCache (model/model.hpp), one step = forward_hidden
// over the packed segments, the LM head on the rows that sample, and the CPU sampler.
//
// Settings, besides the engine's (engine/engine.hpp): threads (per step, 1; while a train step
// runs in the process the engine gets the cores it leaves: backends/cpu/threads.hpp); and the
// engine group's (engine/group_backend.hpp): tensor_parallel, expert_parallel (1, 1) make the engine
// one rank of an engine group (engine.h, Engine groups) of tensor_parallel × expert_parallel ranks,
// a model-parallel layout of one model (model/parallel/model_parallel.hpp places group rank
// ep_rank · tp + tp_rank).
//
// In a group (the protocol: engine/group_backend.hpp) each rank keeps its part of every sequence's
// cache (its attention and GDN heads); all ranks run the sharded forward together (tensor- and
// expert-parallel collectives over MPI) and rank 0 alone applies the LM head and samples (the
// hidden states are the same on every rank). Under TP the LM head is split by token ids
// (model/parallel/vocab_parallel.hpp): every rank runs its range on each segment's last row and
// rank 0 samples from the rows gathered whole. Tokens, logprobs and routed experts are therefore
// those of one rank with the same weights up to the sharded forward's rounding: bit for bit under
// expert parallelism alone, float32 sums in another order under tensor parallelism.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "engine/engine.hpp"
#include "engine/group_backend.hpp"
#include "model/model.hpp"
#include "mlpt/sdk/settings.hpp"

namespace mlpt::ref {

class CpuEngineBackend final : public GroupBackend {
 public:
  CpuEngineBackend(sdk::Settings& settings, const std::string& checkpoint, bool chunked_prefill,
                   const mlpt_component_group* group);

  const ModelConfig& config() const override { return config_; }
  void load_weights(const mlpt_named_tensor* tensors, size_t count, const mlpt_device_ready& ready) override;

 private:
  std::unique_ptr<SequenceState> new_shard_state() override;
  void run_step(const std::vector<StepSegment>& segments, int64_t valid, bool record_routing, StepOutput& out,
                const GroupForward& together) override;
  // run_step's forward and sampling when the TP ranks each hold a range of the LM head.
  void sample_split_vocabulary(const Weights<float>& w, ForwardBatch<float>& fb,
                               const std::vector<StepSegment>& segments, int64_t valid, StepOutput& out,
                               const GroupForward& together);
  std::function<void()> prepare_weights(Weights<float> weights) override;
  std::shared_ptr<const Weights<float>> current_weights();

  ModelConfig config_;        // the whole model's
  ModelConfig shard_config_;  // this rank's part (config_ for an engine alone)
  std::mutex mutex_;  // guards weights_ (a step holds its own reference)
  std::shared_ptr<const Weights<float>> weights_;
  int threads_ = 1;
  GdnMode prefill_mode_ = GdnMode::chunked;
};

// The component: the reference engine on this backend.
class CpuEngine final : public ReferenceEngine {
 public:
  explicit CpuEngine(std::string_view config_json, const mlpt_component_group* group = nullptr);
};

}  // namespace mlpt::ref
